"""kvfence.engine.runner."""
