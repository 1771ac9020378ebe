"""kvfence.gateway.protection.detect."""
