#!/usr/bin/env bash
# `make run`: runs kvfence on its built-in random-weight model.
set -euo pipefail
exec .venv/bin/kvfence generate --prompt "The isolation contract says" --max-tokens 32
