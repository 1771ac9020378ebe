#!/usr/bin/env bash
# `make run`: the whole stack on the built-in (RANDOM-WEIGHT) model for two demo organizations:
# `kvfence serve` on PORT and `kvfence gateway` in front of it on GATEWAY_PORT (default 8080).
#
# Fresh API keys, a fresh server secret and a fresh gateway secret are generated into a temporary
# directory on every run (only SHA-256 hashes go into the keys file and the gateway policy) and
# deleted on exit. The gateway policy is examples/gateway-demo.yaml with those fresh keys. Runs in
# the foreground until Ctrl-C, after printing ready-to-paste curl and `openai` examples.
set -euo pipefail

HOST=${1:-127.0.0.1}
PORT=${2:-8000}
GATEWAY_PORT=${3:-${GATEWAY_PORT:-8080}}
KVFENCE=${KVFENCE:-.venv/bin/kvfence}
PY=${PY:-.venv/bin/python}

# A port already taken would let the health checks below reach whatever holds it (another
# kvfence, say) and fail later with a confusing error; say it now instead.
for port in "$PORT" "$GATEWAY_PORT"; do
    if ! "$PY" -c "import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], int(sys.argv[2])))" "$HOST" "$port" 2>/dev/null; then
        echo "make run: $HOST:$port is already in use (another kvfence?); stop it, or pick free ports: make run PORT=9000 GATEWAY_PORT=9080" >&2
        exit 2
    fi
done

DEMO_DIR=$(mktemp -d -t kvfence-demo-XXXXXX)
KEYS="$DEMO_DIR/keys.toml"
SERVER_PID=""
GATEWAY_PID=""

stop() {
    if [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; then
        kill -TERM "$1" 2>/dev/null || true
        wait "$1" 2>/dev/null || true
    fi
}

cleanup() {
    stop "$GATEWAY_PID"
    stop "$SERVER_PID"
    rm -rf "$DEMO_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ACME_KEY=$("$KVFENCE" keys add --file "$KEYS" --org acme --workspace research --name alice 2>/dev/null)
GLOBEX_KEY=$("$KVFENCE" keys add --file "$KEYS" --org globex --workspace default --name bob 2>/dev/null)

"$KVFENCE" serve --keys "$KEYS" --secret-file "$DEMO_DIR/server-secret" --host "$HOST" --port "$PORT" \
    --cache-scope org --max-model-len auto &
SERVER_PID=$!

# wait_healthy PID URL WHAT: until URL answers 200, or fail if the process died
wait_healthy() {
    echo "waiting for $2 ($3) ..." >&2
    for _ in $(seq 1 600); do
        if ! kill -0 "$1" 2>/dev/null; then
            wait "$1" || exit $?
            exit 1
        fi
        if "$PY" -c "import sys, httpx; sys.exit(httpx.get('$2', timeout=1).status_code != 200)" 2>/dev/null; then
            return 0
        fi
        sleep 0.5
    done
    echo "$3 did not become healthy" >&2
    exit 1
}

BASE="http://$HOST:$PORT"
wait_healthy "$SERVER_PID" "$BASE/health" "the server; the first start builds the built-in model"
MODEL=$("$PY" -c "import httpx; print(httpx.get('$BASE/v1/models', headers={'Authorization': 'Bearer $ACME_KEY'}).json()['data'][0]['id'])")

# The gateway: examples/gateway-demo.yaml with fresh tenant keys, this server's port, a temporary
# audit log and (when built) the model's own tokenizer for exact length caps. Its upstream account
# per organisation is that organisation's server key.
GW_ACME_KEY=$("$KVFENCE" gateway new-key | awk '/^api key:/ {print $3}')
GW_GLOBEX_KEY=$("$KVFENCE" gateway new-key | awk '/^api key:/ {print $3}')
"$PY" - "$DEMO_DIR" "$BASE" "$GW_ACME_KEY" "$GW_GLOBEX_KEY" "$MODEL" <<'PY'
import sys
from pathlib import Path

import yaml

from kvfence.engine.config import kvfence_home
from kvfence.gateway.policy.tenants import hash_api_key

demo_dir, base, acme_key, globex_key, model = sys.argv[1:]
policy = yaml.safe_load(Path("examples/gateway-demo.yaml").read_text())
policy["gateway"]["audit_log"] = f"sqlite:///{demo_dir}/gateway-audit.db"
backend = policy["backends"][0]
backend["url"] = f"{base}/v1"
backend["model_map"] = {"demo": model}
built = sorted((kvfence_home() / "models").glob(f"{model}-v*/tokenizer.json"))
if built:
    backend["tokenizer"] = str(built[-1].parent)
keys = {"acme-alice": acme_key, "globex-bob": globex_key}
for tenant in policy["tenants"]:
    tenant["key_sha256"] = hash_api_key(keys[tenant["name"]])
Path(demo_dir, "gateway.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
PY
"$PY" -c "import secrets; print(secrets.token_hex(32))" > "$DEMO_DIR/gateway-secret"
KVFENCE_GATEWAY_SECRET=$(cat "$DEMO_DIR/gateway-secret") DEMO_ACME_UPSTREAM_KEY="$ACME_KEY" \
DEMO_GLOBEX_UPSTREAM_KEY="$GLOBEX_KEY" \
    "$KVFENCE" gateway --config "$DEMO_DIR/gateway.yaml" --host "$HOST" --port "$GATEWAY_PORT" &
GATEWAY_PID=$!
GW="http://$HOST:$GATEWAY_PORT"
wait_healthy "$GATEWAY_PID" "$GW/health" "the gateway; it loads its detectors"

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

--------------------------------------------------------------------------------
kvfence gateway is up on $GW in front of that server (model alias: demo)
Gateway keys (fresh for this run; each organisation reaches the server with its own key):
  acme-alice (acme/research, class internal) : $GW_ACME_KEY
  globex-bob (globex/default, class public)  : $GW_GLOBEX_KEY
Personal data and secrets are pseudonymised before they leave; the answer gets them back.

curl (the email leaves as a placeholder; X-Data-Class can only raise the class):
  curl -si $GW/v1/chat/completions \\
    -H "Authorization: Bearer $GW_ACME_KEY" -H "Content-Type: application/json" \\
    -H "X-Data-Class: confidential" \\
    -d '{"model": "demo", "messages": [{"role": "user", "content": "Mail jane.doe@example.com the summary"}], "max_tokens": 16}'

openai (Python):
  $PY - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="$GW/v1", api_key="$GW_GLOBEX_KEY")
raw = client.chat.completions.with_raw_response.create(
    model="demo", messages=[{"role": "user", "content": "Hello"}], max_tokens=16)
print(raw.headers["x-kvfence-backend"], raw.headers["x-kvfence-data-class"], raw.headers["x-kvfence-overhead-ms"], "ms")
print(raw.parse().choices[0].message.content)
PY

Audit log (no prompt text):  $KVFENCE gateway log --audit-log sqlite:///$DEMO_DIR/gateway-audit.db
Also: $GW/metrics   $GW/health
Ctrl-C stops both.
================================================================================
EOF

# Run until either process ends (or Ctrl-C); the EXIT trap stops the other one.
while kill -0 "$SERVER_PID" 2>/dev/null && kill -0 "$GATEWAY_PID" 2>/dev/null; do
    sleep 1
done
