"""kvfence.gateway.protection.pseudonymise.placeholders."""
