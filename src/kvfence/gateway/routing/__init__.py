"""kvfence.gateway.routing.classes."""
