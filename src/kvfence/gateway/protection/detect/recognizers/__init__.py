"""kvfence.gateway.protection.detect.recognizers."""
