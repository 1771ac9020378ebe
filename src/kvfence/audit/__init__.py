"""kvfence.audit."""
