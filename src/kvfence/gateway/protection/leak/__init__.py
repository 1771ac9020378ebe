"""kvfence.gateway.protection.leak.scan."""
