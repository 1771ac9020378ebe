"""``kvfence gateway``: run the proxy (``--config FILE``), validate a policy, query the audit log.

Other parts add sub-commands without editing this file: a module ``kvfence.gateway.protection.cli``
that defines ``register(group: click.Group) -> None`` is imported the first time the group lists
its commands.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import logging
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from kvfence.errors import ConfigError

__all__ = ["audit_url_for", "gateway"]

EXTENSION_MODULES = ("kvfence.gateway.protection.cli",)


class _GatewayGroup(click.Group):
    _extended = False

    def _extend(self) -> None:
        if self._extended:
            return
        self._extended = True
        for name in EXTENSION_MODULES:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and name.startswith(exc.name):
                    continue  # that part is not installed: nothing to add
                raise
            register = getattr(module, "register", None)
            if register is not None:
                register(self)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._extend()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._extend()
        return super().get_command(ctx, cmd_name)


_config_option = click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
                              help="Policy file (YAML).")


def _serve(config: Path, host: str, port: int, audit_log: str | None, log_level: str,
           graceful_timeout: float, workers: int | None = None, pid_file: Path | None = None) -> None:
    from kvfence.gateway.policy.loader import load_policy

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # SIGHUP reloads the policy (reload.py); until the app takes it, it must not end the process
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    policy = load_policy(config)
    count = workers if workers is not None else policy.gateway.workers
    with _pid_file(pid_file):
        if count == 1:
            from kvfence.listen import bind_listening_socket

            # Bound before the server starts: a port in use is one error line (exit code 2).
            sock = bind_listening_socket(host, port)
            code = _serve_process(config, policy, host, sock.getsockname()[1], audit_log, log_level,
                                  graceful_timeout, sock=sock, policy_loader=lambda: load_policy(config))
            if code:
                raise SystemExit(code)
            return
        _serve_workers(count, config, policy, host, port, audit_log, log_level, graceful_timeout)


@contextlib.contextmanager
def _pid_file(path: Path | None) -> Iterator[None]:
    """``--pid-file``: this process's id while it runs (what ``kvfence gateway reload`` signals)."""
    if path is None:
        yield
        return
    try:
        path.write_text(f"{os.getpid()}\n", encoding="ascii")
    except OSError as exc:
        raise ConfigError(f"--pid-file {path}: {exc.strerror or exc}") from exc
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if path.read_text(encoding="ascii").strip() == str(os.getpid()):
                path.unlink()


def _serve_workers(count: int, config: Path, policy: Any, host: str, port: int, audit_log: str | None,
                   log_level: str, graceful_timeout: float) -> None:
    """The supervisor of ``count`` worker processes (``kvfence.gateway.workers.supervisor``)."""
    from kvfence.gateway.policy.loader import load_policy
    from kvfence.gateway.workers.shared_state import shared_state_problems, split_limits
    from kvfence.gateway.workers.supervisor import Supervisor, WorkersFailed, WorkerSocket

    def worker_policy_of(policy: Any) -> Any:
        problems = shared_state_problems(policy, count)
        if problems:
            raise ConfigError("\n".join(problems))
        return split_limits(policy, count)

    def load_worker_policy() -> Any:
        return worker_policy_of(load_policy(config))

    # the policy a worker (re)started now runs: the newest one that validated (each running worker
    # reloads on its own on SIGHUP)
    current = {"policy": worker_policy_of(policy)}

    def on_hangup() -> None:
        try:
            current["policy"] = load_worker_policy()
        except ConfigError as exc:
            logging.getLogger("kvfence.gateway").error("policy reload failed in the supervisor, workers it "
                                                       "restarts keep the last valid policy: %s", exc)
    try:
        sock = WorkerSocket(host, port)
    except OSError as exc:
        from kvfence.listen import bind_error

        raise bind_error(host, port, exc) from exc
    click.echo(f"kvfence gateway: {count} workers on http://{host}:{sock.port} "
               f"({'SO_REUSEPORT' if sock.reuse_port else 'one shared socket'})", err=True)

    def main(worker: Any, listen: Any, ready: Any) -> int:
        try:
            return _serve_process(config, current["policy"], host, sock.port, audit_log, log_level,
                                  graceful_timeout, sock=listen, worker=worker, on_started=ready,
                                  policy_loader=load_worker_policy)
        except ConfigError as exc:
            click.echo(f"kvfence gateway worker {worker.index}: {exc}", err=True)
            return exc.exit_code if isinstance(getattr(exc, "exit_code", None), int) else 2
        except ModuleNotFoundError as exc:  # as kvfence.cli.main says it for one process
            from kvfence.extras import missing_extra

            missing = missing_extra(exc, "`kvfence gateway`")
            if missing is None:
                raise
            click.echo(f"kvfence gateway worker {worker.index}: {missing}", err=True)
            return missing.exit_code

    try:
        Supervisor(count, sock, main, on_hangup=on_hangup).run()
    except WorkersFailed as exc:
        click.echo(f"kvfence gateway: {exc}", err=True)
        raise SystemExit(exc.exit_code) from None


def _serve_process(config: Path, policy: Any, host: str, port: int, audit_log: str | None, log_level: str,
                   graceful_timeout: float, *, sock: Any = None, worker: Any = None,
                   on_started: Any = None, policy_loader: Any = None) -> int:
    """Run one gateway process (the only one, or one worker on ``sock``); its exit status."""
    from kvfence.gateway.app import build_app
    from kvfence.gateway.runtime import GatewayRuntime
    from kvfence.http import timing_probe
    from kvfence.http.server import LifespanFailed
    from kvfence.http.server import run as run_http

    runtime = GatewayRuntime.create(policy, base_dir=config.parent, audit_url=audit_log)
    runtime.worker = worker
    runtime.policy_loader = policy_loader  # SIGHUP re-reads the file through it (reload.py)
    who = "kvfence gateway" if worker is None else f"kvfence gateway worker {worker.index} (pid {os.getpid()})"
    limits = http_config(policy.gateway, graceful_timeout)
    click.echo(f"{who}: {len(policy.backends)} backend(s), {len(policy.tenants)} tenant(s), "
               f"{len(runtime.hooks)} hook(s); on http://{host}:{port}", err=True)
    # uvloop and httptools (C event loop and parser) are dependencies on purpose: the gateway's CPU per
    # streamed chunk is mostly the server's; say so if a platform lacks them rather than run slow silently.
    use_uvloop = importlib.util.find_spec("uvloop") is not None
    if not use_uvloop:
        logging.getLogger("kvfence.gateway").warning("uvloop is not installed: the gateway runs on the slower asyncio event loop")
    app = build_app(runtime, freeze_heap=True, on_started=on_started)
    # Everything imported and built so far lives as long as the process: move it out of the cyclic
    # collector's reach, so that a full collection under load scans the requests' objects only
    # (a full collection of the start-up heap takes ~70 ms of CPU here: a pause every stream feels).
    # The app freezes once more when the server is up, for what is imported as it starts.
    gc.collect()
    gc.freeze()
    timing_probe.install()
    try:
        run_http(app, hot=app.completion_response, host=host, port=port, use_uvloop=use_uvloop, config=limits,
                 sock=sock)
    except LifespanFailed as exc:
        click.echo(f"{who}: {exc}", err=True)
        return exc.exit_code
    return 0


def http_config(settings: Any, graceful_timeout: float) -> Any:
    """The HTTP server's limits from the policy's ``gateway`` section (``gateway.http``, ``max_body_bytes``)."""
    from kvfence.http.server import HttpConfig

    http = settings.http
    return HttpConfig(idle_timeout_s=http.idle_timeout_s, head_timeout_s=http.head_timeout_s,
                      body_timeout_s=http.body_timeout_s, max_head_bytes=http.max_head_bytes,
                      max_headers=http.max_headers, max_body_bytes=settings.max_body_bytes,
                      graceful_timeout_s=graceful_timeout)


def _run_options(func: Any) -> Any:
    func = click.option("--log-level", default="warning", show_default=True,
                        type=click.Choice(["debug", "info", "warning", "error"]))(func)
    func = click.option("--audit-log", default=None, help="Override gateway.audit_log (sqlite:///PATH or postgresql://...).")(func)
    func = click.option("--graceful-timeout", default=30.0, show_default=True, type=click.FloatRange(0),
                        help="On SIGTERM/SIGINT, seconds that answers in progress get to finish.")(func)
    func = click.option("--workers", default=None, type=click.IntRange(1, 256),
                        help="Gateway processes accepting on the port (default: gateway.workers, 1). With more "
                             "than one, limits and leak fingerprints must be shared (gateway.redis_url, "
                             "leak.index: redis).")(func)
    func = click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))(func)
    func = click.option("--host", default="127.0.0.1", show_default=True)(func)
    func = click.option("--pid-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        help="Write the gateway's process id here (for `kvfence gateway reload --pid-file`).")(func)
    return _config_option(func)


@click.group(cls=_GatewayGroup, invoke_without_command=True)
@_run_options
@click.pass_context
def gateway(ctx: click.Context, config: Path | None, pid_file: Path | None, host: str, port: int,
            workers: int | None, graceful_timeout: float, audit_log: str | None, log_level: str) -> None:
    """Tenant-aware proxy: `kvfence gateway --config gateway.yaml` runs it."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        click.echo(ctx.get_help())
        raise click.UsageError("give --config FILE to run the gateway, or a sub-command")
    _serve(config, host, port, audit_log, log_level, graceful_timeout, workers, pid_file)


@gateway.command("run")
@_run_options
def run(config: Path | None, pid_file: Path | None, host: str, port: int, workers: int | None,
        graceful_timeout: float, audit_log: str | None, log_level: str) -> None:
    """Run the gateway (same as `kvfence gateway --config FILE`)."""
    if config is None:
        raise click.UsageError("--config FILE is required")
    _serve(config, host, port, audit_log, log_level, graceful_timeout, workers, pid_file)


@gateway.command("reload")
@click.option("--config", "config", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The policy file the gateway runs (validated here first).")
@click.option("--pid", type=click.IntRange(1), default=None, help="The gateway's process id (the supervisor's "
                                                                   "with --workers).")
@click.option("--pid-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The file the gateway was started with (--pid-file).")
def reload(config: Path, pid: int | None, pid_file: Path | None) -> None:
    """Validate the policy file, then tell the running gateway to reload it (SIGHUP).

    The gateway re-reads and validates the file itself, in every worker, and swaps the new policy in if it
    is valid; requests in flight finish under the policy they started with. On a bad file it keeps the
    old policy and logs the error; /health shows the policy generation and the last reload error."""
    import signal as signals

    from kvfence.gateway.policy.loader import load_policy
    from kvfence.gateway.workers.shared_state import shared_state_problems

    if (pid is None) == (pid_file is None):
        raise click.UsageError("give one of --pid PID or --pid-file FILE")
    if pid is None:
        assert pid_file is not None
        try:
            pid = int(pid_file.read_text(encoding="ascii").strip())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--pid-file {pid_file}: no process id in it ({exc})") from exc
    policy = load_policy(config)  # a bad file: its FILE:LINE errors here, exit 2, nothing signalled
    problems = shared_state_problems(policy, policy.gateway.workers)
    if problems:
        raise ConfigError("\n".join(problems))
    # a pid file outlives its gateway when the server ends the process by re-raising SIGTERM; that pid may
    # be another program's by now, which SIGHUP would stop
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.parent.parent.is_dir() and Path("/proc/self").exists():
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ")
        except OSError:
            command = None
        if command is None or b"kvfence" not in command:
            raise ConfigError(f"process {pid} is not a kvfence gateway: is the gateway running? "
                              f"(a stale --pid-file?)")
    try:
        os.kill(pid, signals.SIGHUP)
    except ProcessLookupError:
        raise ConfigError(f"no process {pid}: is the gateway running?") from None
    except PermissionError:
        raise ConfigError(f"not allowed to signal process {pid}") from None
    click.echo(f"{config}: valid; asked the gateway (pid {pid}) to reload it")


@gateway.command("check")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--routes", is_flag=True, help="Also print, per tenant and class, the allowed backends and why "
                                             "the others are refused (vendor facts from the file only).")
def check(config: Path, routes: bool) -> None:
    """Validate a policy file and print what it routes where; exit 2 naming each problem."""
    from kvfence.gateway.policy.loader import load_policy
    from kvfence.gateway.workers.shared_state import shared_state_problems

    policy = load_policy(config)
    problems = shared_state_problems(policy, policy.gateway.workers)
    if problems:  # what `kvfence gateway` would refuse at start-up
        raise ConfigError("\n".join(problems))
    click.echo(f"{config}: OK — {len(policy.data_classes)} data classes, {len(policy.backends)} backends, "
               f"{len(policy.tenants)} tenants"
               + (f"; {policy.gateway.workers} workers" if policy.gateway.workers > 1 else ""))
    for data_class in policy.data_classes:
        tiers = ", ".join(t.value for t in data_class.allowed_tiers)
        click.echo(f"  {data_class.name}: tiers {tiers}; over cap: {data_class.over_cap.action.value}")
    if routes:
        _print_routes(policy)


def _print_routes(policy: Any) -> None:
    """Static routing table: capacity from the file's facts, every credential variable a distinct secret."""
    from kvfence.gateway.errors import GatewayError
    from kvfence.gateway.policy.accounts import UpstreamAccounts
    from kvfence.gateway.policy.tenants import GatewayTenant
    from kvfence.gateway.routing.classes import BackendView, choose_backends

    tenants = [GatewayTenant.from_config(t) for t in policy.tenants]
    names = [b.auth.api_key_env for b in policy.backends if b.auth.api_key_env]
    for b in policy.backends:
        names += [*b.auth.per_organization.values(), *b.auth.per_tenant.values()]
    accounts = UpstreamAccounts(policy.backends, tenants, {name: f"secret-of-{name}" for name in names})
    click.echo("routes (static: capacity from the file's facts only, each credential variable taken as a "
               "distinct secret; a running gateway discovers capacity, see /health):")
    for tenant in tenants:
        click.echo(f"tenant {tenant.name} ({tenant.organization}/{tenant.workspace}, "
                   f"default {tenant.default_class}):")
        views = []
        for b in policy.backends:
            account = accounts.for_tenant(b, tenant)
            views.append(BackendView(b, account.kind, account.merged, b.facts.advertised_context,
                                     b.facts.kv_capacity_tokens))
        for data_class in policy.class_names():
            model = next((m for b in policy.backends for m in b.models), "any")
            try:
                decision = choose_backends(policy, tenant, data_class, model, views)
                click.echo(f"  {data_class:14} -> {', '.join(b.name for b in decision.allowed)}")
            except GatewayError as exc:
                reasons = exc.message.split(": ", 1)[-1]
                click.echo(f"  {data_class:14} -> REFUSED ({exc.code}): {reasons}")


@gateway.command("new-key")
def new_key() -> None:
    """Print a fresh gateway API key and the key_sha256 to put in the policy."""
    from kvfence.gateway.policy.tenants import generate_api_key, hash_api_key

    key = generate_api_key()
    click.echo(f"api key:    {key}\nkey_sha256: {hash_api_key(key)}")


@gateway.command("hash-key")
@click.argument("key", envvar="KVFENCE_GATEWAY_KEY")
def hash_key(key: str) -> None:
    """Print the key_sha256 of an existing key (or $KVFENCE_GATEWAY_KEY)."""
    from kvfence.gateway.policy.tenants import hash_api_key

    click.echo(hash_api_key(key))


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def _since(value: str | None) -> float | None:
    if value is None:
        return None
    match = _DURATION.match(value.strip())
    if match is None:
        raise click.BadParameter("use a duration like 30s, 15m, 2h or 7d", param_hint="--since")
    return time.time() - float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def audit_url_for(config: Path | None, audit_log: str | None) -> str:
    """The audit-log URL from ``--audit-log`` or else the policy's ``gateway.audit_log``."""
    if audit_log:
        return audit_log
    if config is None:
        raise click.UsageError("give --config FILE (its gateway.audit_log) or --audit-log URL")
    from kvfence.gateway.policy.loader import load_policy
    from kvfence.gateway.runtime import _resolve_sqlite

    return _resolve_sqlite(load_policy(config).gateway.audit_log, config.parent)


_audit_url = audit_url_for  # kept for kvfence.gateway.protection.cli


@gateway.command("log")
@_config_option
@click.option("--audit-log", default=None, help="sqlite:///PATH or postgresql://... (instead of --config).")
@click.option("--tenant", default=None)
@click.option("--org", "organization", default=None)
@click.option("--class", "data_class", default=None)
@click.option("--backend", default=None)
@click.option("--outcome", type=click.Choice(["ok", "rejected", "upstream_error", "leak", "error"]), default=None)
@click.option("--request-id", default=None)
@click.option("--since", default=None, help="Only the last 30s / 15m / 2h / 7d.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def log_command(config: Path | None, audit_log: str | None, tenant: str | None, organization: str | None,
                data_class: str | None, backend: str | None, outcome: str | None, request_id: str | None,
                since: str | None, limit: int, as_json: bool) -> None:
    """Query the audit log of decisions (newest first); it holds no prompt text."""
    from kvfence.gateway.records.audit_log import open_audit_log

    url = audit_url_for(config, audit_log)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise ConfigError(f"no audit log at {url.removeprefix('sqlite:///')} (has the gateway run yet?)")
    audit = open_audit_log(url)
    try:
        rows = audit.query_decisions(since=_since(since), limit=limit, tenant=tenant, organization=organization,
                                     data_class=data_class, backend=backend, outcome=outcome,
                                     request_id=request_id)
    finally:
        audit.close()
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, sort_keys=True, default=str))
        return
    if not rows:
        click.echo("no matching decisions")
        return
    click.echo(f"{'time (UTC)':19}  {'status':>6}  {'outcome':14} {'tenant':16} {'class':14} {'backend':16} "
               f"{'tokens':>7} {'cut':>5} {'ms':>8}  reason")
    for row in rows:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row["ts"]))
        tokens = "" if row["prompt_tokens"] is None else str(row["prompt_tokens"])
        latency = "" if row["latency_ms"] is None else f"{row['latency_ms']:.1f}"
        click.echo(f"{stamp:19}  {row['status']:>6}  {row['outcome']:14} {row['tenant']:16} "
                   f"{(row['data_class'] or '-'):14} {(row['backend'] or '-'):16} {tokens:>7} "
                   f"{row['tokens_cut'] or 0:>5} {latency:>8}  {row['reason'] or ''}")



@gateway.group("keys")
def keys() -> None:
    """Add, revoke and list the policy's tenant keys (hash only, file locked, atomic write).

    The running gateway takes a change on its next reload: `kvfence gateway reload`, or SIGHUP."""


_policy_file_option = click.option("--config", "config", required=True,
                                   type=click.Path(dir_okay=False, exists=True, path_type=Path),
                                   help="The policy file (its tenants_file, when it has one, holds new tenants).")


@keys.command("add")
@_policy_file_option
@click.option("--name", required=True, help="Tenant name (unique in the policy).")
@click.option("--org", "organization", required=True, help="Organization.")
@click.option("--workspace", default="default", show_default=True)
@click.option("--class", "data_class", default=None, help="Default data class (default: the policy's first).")
@click.option("--requests-per-minute", type=click.IntRange(1), default=None)
@click.option("--tokens-per-minute", type=click.IntRange(1), default=None)
@click.option("--max-concurrent", type=click.IntRange(1), default=None)
def keys_add(config: Path, name: str, organization: str, workspace: str, data_class: str | None,
             requests_per_minute: int | None, tokens_per_minute: int | None, max_concurrent: int | None) -> None:
    """Add a tenant with a fresh key: the key is printed once (stdout), only its SHA-256 is written."""
    from kvfence.gateway.policy.keys import add_key

    limits = {k: v for k, v in (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute),
                                ("max_concurrent", max_concurrent)) if v is not None}
    added = add_key(config, name=name, organization=organization, workspace=workspace, data_class=data_class,
                    limits=limits)
    click.echo(f"added tenant {added.tenant} to {added.file}; the key is shown once, keep it now "
               f"(apply: kvfence gateway reload --config {config} --pid-file ...)", err=True)
    click.echo(added.api_key)


@keys.command("revoke")
@_policy_file_option
@click.option("--name", required=True, help="The tenant whose key to revoke.")
def keys_revoke(config: Path, name: str) -> None:
    """Remove a tenant and its key from the policy."""
    from kvfence.gateway.policy.keys import revoke_key

    edited = revoke_key(config, name)
    click.echo(f"revoked tenant {name} in {edited} (apply: kvfence gateway reload --config {config} "
               f"--pid-file ...)")


@keys.command("list")
@_policy_file_option
def keys_list(config: Path) -> None:
    """List the tenants: name, organization/workspace, default class, the start of the key's hash."""
    from kvfence.gateway.policy.keys import list_keys

    for row in list_keys(config):
        click.echo(f"{row['name']}  {row['organization']}/{row['workspace']}  class:{row['class']}  "
                   f"sha256:{row['sha256']}…")
