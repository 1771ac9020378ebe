"""kvfence.gateway."""
