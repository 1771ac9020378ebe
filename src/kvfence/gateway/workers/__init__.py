"""kvfence.gateway.workers.supervisor."""
