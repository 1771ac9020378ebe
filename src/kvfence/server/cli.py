"""``kvfence serve`` and ``kvfence keys``: the server and its tenant keys from the command line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from kvfence.engine.cli_options import engine_config as build_engine_config
from kvfence.engine.cli_options import engine_options, generation_config_option, parse_size
from kvfence.engine.core.runtime import runtime_class
from kvfence.engine.runner.model_path import resolve_model_dir
from kvfence.errors import ConfigError
from kvfence.http.server import HttpConfig
from kvfence.scope import CacheScope
from kvfence.server.auth.keys import add_key, load_keys, write_keys
from kvfence.server.config import ServerConfig

__all__ = ["keys", "parse_size", "serve"]


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="TCP port to listen on.")
@click.option("--keys", "keys_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="TOML file of API keys (SHA-256 hashes) mapping to organization/workspace/key name; "
                   "create entries with `kvfence keys add`. Re-read when it changes.")
@click.option("--no-auth", is_flag=True, help="Serve one local tenant without API keys (local use only).")
@click.option("--cache-scope", type=click.Choice([s.value for s in CacheScope]), default="org", show_default=True,
              help="Who may share prefix-cache pages: global (everybody: single-organization servers only), "
                   "org, workspace, key, or request (no sharing). Derived from the authenticated key, "
                   "never from the request body (I5); a client cache_salt can only narrow it.")
@click.option("--secret-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File holding the server secret that keys cache scopes (HMAC). Generated with mode 0600 "
                   "if absent. $KVFENCE_SERVER_SECRET overrides it. "
                   "Default: $KVFENCE_HOME/server-secret or ~/.config/kvfence/server-secret.")
@click.option("--metrics-key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="File holding a bearer token for GET /metrics (one word, >= 16 characters; Prometheus: "
                   "authorization.credentials_file). With it, /metrics answers 401 without that token and the "
                   "full per-organization series with it. Without it, /metrics shows only totals summed over "
                   "organizations when API keys are on (everything with --no-auth).")
@click.option("--max-queue-len", type=int, default=256, show_default=True,
              help="Requests that may wait beyond --max-num-seqs; more are refused with 429.")
@click.option("--max-org-share", type=float, default=0.5, show_default=True,
              help="Most of the request slots (--max-num-seqs + --max-queue-len) one organization may hold "
                   "when the keys file has two or more organizations; its next request gets 429 queue_full, so "
                   "one tenant cannot lock the others out. 1.0 turns the share off.")
@click.option("--max-body-bytes", type=click.IntRange(min=1024), default=16 * 1024 * 1024, show_default=True,
              help="Largest request body; larger ones get 413 (a Content-Length over it before the body is read).")
@click.option("--max-head-bytes", type=click.IntRange(min=1024), default=64 * 1024, show_default=True,
              help="Largest request head (request line and header fields); larger get 431.")
@click.option("--max-headers", type=click.IntRange(min=8), default=100, show_default=True,
              help="Most header fields per request; more get 431.")
@click.option("--head-timeout", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="Seconds a request head may take from its first byte (slow heads get 408 and a close).")
@click.option("--body-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Seconds a request body may take after its head (slow bodies get 408 and a close).")
@click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True), default=15.0, show_default=True,
              help="Seconds a connection without a request in progress is kept open.")
@click.option("--served-model-name", multiple=True,
              help="Name(s) clients use in the 'model' field. Default: the model's own name.")
@generation_config_option
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the built-in model's weights "
              "and of unseeded sampling.")
@engine_options
@click.option("--disagg", is_flag=True,
              help="Disaggregated prefill/decode: spawn a local prefill worker; every KV handoff is verified (I4).")
@click.option("--prefill-address", default=None, metavar="URL",
              help="Connect to a running `kvfence disagg prefill-worker` (tcp://127.0.0.1:PORT or ipc://PATH); "
                   "implies --disagg.")
@click.option("--handoff-key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Hex key shared with the prefill worker (page checksums, manifest MAC). "
                   "Default: $KVFENCE_HANDOFF_KEY; a spawned worker gets a random one.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def serve(**opts: Any) -> None:
    """Run the OpenAI-compatible server (completions, chat, streaming) with per-tenant cache scopes.

    Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/capacity,
    GET /health, GET /metrics.
    """
    logging.basicConfig(level=opts["log_level"].upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if opts["keys_file"] is None and not opts["no_auth"]:
        raise ConfigError("give --keys FILE (tenants and their API keys) or --no-auth (one local tenant)")
    if opts["keys_file"] is not None and opts["no_auth"]:
        raise ConfigError("--keys and --no-auth exclude each other")
    config = ServerConfig(
        host=opts["host"],
        port=opts["port"],
        keys_path=opts["keys_file"],
        cache_scope=CacheScope.parse(opts["cache_scope"]),
        secret_path=opts["secret_file"],
        served_model_names=tuple(opts["served_model_name"]),
        max_queue_len=opts["max_queue_len"],
        generation_config=opts["generation_config"],
        metrics_key_path=opts["metrics_key_file"],
        max_org_share=opts["max_org_share"],
        max_body_bytes=opts["max_body_bytes"],
        http=HttpConfig(idle_timeout_s=opts["idle_timeout"], head_timeout_s=opts["head_timeout"],
                        body_timeout_s=opts["body_timeout"], max_head_bytes=opts["max_head_bytes"],
                        max_headers=opts["max_headers"], max_body_bytes=opts["max_body_bytes"],
                        graceful_timeout_s=5.0),
    )
    engine_config = build_engine_config(opts, seed=opts["seed"])
    # The runtime's array library is imported here, before the port is bound and the model loads in
    # the background: a missing one (torch without the engine extra) is one error line, exit code 2.
    runtime_class(engine_config.runtime)
    if opts["model"] is not None and not resolve_model_dir(str(opts["model"])).is_dir():
        raise ConfigError(f"--model {opts['model']} is not a directory")
    disagg_config = None
    if opts["disagg"] or opts["prefill_address"]:
        from kvfence.disagg.config import DisaggConfig, read_handoff_key

        key = read_handoff_key(opts["handoff_key_file"])
        disagg_config = DisaggConfig(engine=engine_config, prefill_address=opts["prefill_address"],
                                     handoff_key=key or None)
    from kvfence.server.runner import run_server

    run_server(config, engine_config, log_level=opts["log_level"], disagg_config=disagg_config)


@click.group("keys")
def keys() -> None:
    """Manage the tenant API keys of `kvfence serve` (a TOML file of SHA-256 hashes)."""


_file_option = click.option("--file", "path", required=True, type=click.Path(dir_okay=False, path_type=Path),
                            help="The keys file (TOML; `keys add` creates it).")


@keys.command("add")
@_file_option
@click.option("--org", "organization", required=True, help="Organization the key belongs to.")
@click.option("--workspace", default="default", show_default=True, help="Workspace inside the organization.")
@click.option("--name", required=True, help="Name of the key (unique within org/workspace).")
@click.option("--max-concurrent-requests", type=click.IntRange(min=1), default=None,
              help="Most requests this key may have in flight (429 beyond).")
@click.option("--max-prompt-tokens", type=click.IntRange(min=1), default=None,
              help="Longest prompt this key may send, in tokens (400 beyond).")
def keys_add(path: Path, organization: str, workspace: str, name: str,
             max_concurrent_requests: int | None, max_prompt_tokens: int | None) -> None:
    """Add a key and print its secret ONCE (only its SHA-256 hash is stored)."""
    secret = add_key(path, organization=organization, workspace=workspace, name=name,
                     max_concurrent_requests=max_concurrent_requests, max_prompt_tokens=max_prompt_tokens)
    click.echo(f"added key {organization}/{workspace}/{name} to {path}", err=True)
    click.echo("the secret is shown only now; store it safely:", err=True)
    click.echo(secret)


@keys.command("list")
@_file_option
def keys_list(path: Path) -> None:
    """List keys (organization, workspace, name, limits); secrets are never stored."""
    if not path.exists():  # a mistyped name would otherwise read as an empty, valid keys file
        raise ConfigError(f"no keys file at {path} (`kvfence keys add --file {path} ...` creates it)")
    entries = load_keys(path)
    if not entries:
        click.echo(f"no keys in {path}", err=True)
    for k in entries:
        limits = []
        if k.max_concurrent_requests is not None:
            limits.append(f"max_concurrent_requests={k.max_concurrent_requests}")
        if k.max_prompt_tokens is not None:
            limits.append(f"max_prompt_tokens={k.max_prompt_tokens}")
        click.echo(f"{k.organization}/{k.workspace}/{k.name}  id:{k.scope_id}  sha256:{k.sha256[:12]}…  {' '.join(limits)}".rstrip())


@keys.command("revoke")
@_file_option
@click.option("--org", "organization", required=True)
@click.option("--workspace", default="default", show_default=True)
@click.option("--name", required=True)
def keys_revoke(path: Path, organization: str, workspace: str, name: str) -> None:
    """Remove a key; a running server stops accepting it within a second."""
    entries = load_keys(path)
    kept = [k for k in entries if (k.organization, k.workspace, k.name) != (organization, workspace, name)]
    if len(kept) == len(entries):
        raise ConfigError(f"no key {organization}/{workspace}/{name} in {path}")
    write_keys(path, kept)
    click.echo(f"revoked {organization}/{workspace}/{name}", err=True)

