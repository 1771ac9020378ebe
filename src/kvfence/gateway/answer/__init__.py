"""kvfence.gateway.answer.relay."""
