"""kvfence.engine.core."""
