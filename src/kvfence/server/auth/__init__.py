"""kvfence.server.auth.middleware."""
