"""kvfence.server.openai."""
