"""kvfence.gateway.policy.schema."""
