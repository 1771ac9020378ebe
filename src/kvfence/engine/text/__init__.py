"""kvfence.engine.text."""
