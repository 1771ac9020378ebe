"""kvfence.engine.sampling."""
