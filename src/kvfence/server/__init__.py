"""kvfence.server."""
