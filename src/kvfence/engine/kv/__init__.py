"""kvfence.engine.kv."""
