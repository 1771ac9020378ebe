"""kvfence.gateway.records."""
