"""kvfence.gateway.transport."""
