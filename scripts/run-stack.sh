#!/usr/bin/env bash
# `make run`: `kvfence serve` on the built-in (RANDOM-WEIGHT) model for two demo organizations.
#
# Fresh API keys and a fresh server secret are generated into a temporary directory on every run
# (only SHA-256 hashes go into the keys file) and deleted on exit. Runs in the foreground until
# Ctrl-C, after printing ready-to-paste curl and `openai` examples.
set -euo pipefail

HOST=${1:-127.0.0.1}
PORT=${2:-8000}
KVFENCE=${KVFENCE:-.venv/bin/kvfence}
PY=${PY:-.venv/bin/python}

DEMO_DIR=$(mktemp -d -t kvfence-demo-XXXXXX)
KEYS="$DEMO_DIR/keys.toml"
SERVER_PID=""

cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$DEMO_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ACME_KEY=$("$KVFENCE" keys add --file "$KEYS" --org acme --workspace research --name alice 2>/dev/null)
GLOBEX_KEY=$("$KVFENCE" keys add --file "$KEYS" --org globex --workspace default --name bob 2>/dev/null)

"$KVFENCE" serve --keys "$KEYS" --secret-file "$DEMO_DIR/server-secret" --host "$HOST" --port "$PORT" \
    --cache-scope org --max-model-len auto &
SERVER_PID=$!

BASE="http://$HOST:$PORT"
echo "waiting for $BASE/health (the first start builds the built-in model) ..." >&2
for _ in $(seq 1 600); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        wait "$SERVER_PID" || exit $?
        exit 1
    fi
    if "$PY" -c "import sys, httpx; sys.exit(httpx.get('$BASE/health', timeout=1).status_code != 200)" 2>/dev/null; then
        break
    fi
    sleep 0.5
done
MODEL=$("$PY" -c "import httpx; print(httpx.get('$BASE/v1/models', headers={'Authorization': 'Bearer $ACME_KEY'}).json()['data'][0]['id'])")

cat <<EOF

================================================================================
kvfence serve is up on $BASE  (model: $MODEL, RANDOM WEIGHTS: gibberish by design)
Demo keys (fresh for this run, deleted on exit):
  organization acme   : $ACME_KEY
  organization globex : $GLOBEX_KEY
Prefix-cache pages are shared only inside an organization (--cache-scope org).

curl:
  curl -s $BASE/v1/chat/completions \\
    -H "Authorization: Bearer $ACME_KEY" -H "Content-Type: application/json" \\
    -d '{"model": "$MODEL", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16, "temperature": 0}'

  curl -sN $BASE/v1/completions \\
    -H "Authorization: Bearer $GLOBEX_KEY" -H "Content-Type: application/json" \\
    -d '{"model": "$MODEL", "prompt": "Once upon a time", "max_tokens": 16, "stream": true}'

openai (Python):
  $PY - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="$BASE/v1", api_key="$ACME_KEY")
r = client.chat.completions.create(model="$MODEL", messages=[{"role": "user", "content": "Hello"}],
                                   max_tokens=16, temperature=0)
print(r.choices[0].message.content, r.usage)
PY

Also: $BASE/v1/capacity   $BASE/metrics   $BASE/health
Ctrl-C stops the server.
================================================================================
EOF

wait "$SERVER_PID"
