"""kvfence.gateway.admission."""
