"""Policy reload without a restart: ``SIGHUP`` to a gateway (every worker, with ``--workers N``), or
``kvfence gateway reload``.

One reload: re-read and validate the policy file (``policy_loader``, the same code as at start-up);
build a new generation of the runtime for it (``runtime.py``: new tenants, accounts, backends that changed,
token counters, hooks; shared audit log, metrics, limiter, leak index, pools of unchanged backends); swap
it in one event-loop step. Requests in flight finish under the generation they started with. On any
failure nothing changes: the old policy stays, and the error (``FILE:LINE: field: problem`` from the
loader) is logged as one line and counted, never a traceback, and kept for ``/health``.

Settings that shape process-lifetime state are not reloaded (:data:`RESTART_ONLY`): a file changing one
of them is refused as a whole, naming it, so the running policy is always one that was validated whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Any

from prometheus_client import Counter, Gauge

from kvfence.errors import ConfigError, KvfenceError
from kvfence.extras import missing_extra
from kvfence.gateway.admission.capacity import CapacityInfo
from kvfence.gateway.admission.tokens import TokenCounter, load_counter
from kvfence.gateway.policy.accounts import UpstreamAccounts
from kvfence.gateway.policy.schema import Policy
from kvfence.gateway.policy.tenants import GatewayTenant
from kvfence.gateway.runtime import BackendState, GatewayRuntime
from kvfence.gateway.transport.upstream import make_upstream_client

__all__ = ["RESTART_ONLY", "PolicyReloader", "restart_only_changes"]

log = logging.getLogger("kvfence.gateway")

# gateway.* settings a running gateway cannot take over: its secret, its audit log, its shared state,
# its worker layout, the hook modules it imported, its rate-limit window, its HTTP server's connection
# limits (kvfence.http, set when it starts listening; max_body_bytes is one of them), its metrics key file.
RESTART_ONLY = ("secret_env", "audit_log", "redis_url", "workers", "worker_limits", "hooks", "load_protection",
                "limit_window_s", "http", "max_body_bytes", "metrics_key_file")


# after a backend leaves the policy (or changes), how long past its read timeout its pool stays open for the
# requests still using it
RETIRE_GRACE_S = 30.0


def restart_only_changes(old: Policy, new: Policy) -> list[str]:
    """The ``gateway.*`` settings that differ between ``old`` and ``new`` and need a restart."""
    return [f"gateway.{name}" for name in RESTART_ONLY
            if getattr(old.gateway, name) != getattr(new.gateway, name)]


class PolicyReloader:
    """Reloads one runtime's policy; one reload at a time (a signal during one queues one more)."""

    def __init__(self, runtime: GatewayRuntime) -> None:
        self.runtime = runtime
        self._lock = asyncio.Lock()
        registry = runtime.metrics.registry
        self._outcomes = Counter("kvfence_gateway_policy_reloads", "Policy reloads, by outcome (ok, failed).",
                                 ["outcome"], registry=registry)
        self._generation = Gauge("kvfence_gateway_policy_generation",
                                 "Policy generation in force (1 at start, +1 per successful reload).",
                                 registry=registry)
        self._generation.set(runtime.generation)
        self._tasks: set[asyncio.Task[bool]] = set()

    def install_signal_handler(self) -> bool:
        """Reload on SIGHUP (False where the loop cannot take signals: not the main thread)."""
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.request_reload)
        except (NotImplementedError, RuntimeError, ValueError):
            return False
        return True

    def remove_signal_handler(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

    def request_reload(self) -> None:
        task = asyncio.get_running_loop().create_task(self.reload())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def reload(self) -> bool:
        """Reload now; True if the new policy is in force, False if the old one stays."""
        async with self._lock:
            runtime = self.runtime
            try:
                if runtime.policy_loader is None:
                    raise ConfigError("this gateway was not started from a policy file: nothing to reload")
                # reading and validating the file is blocking work: off the event loop
                policy = await asyncio.to_thread(runtime.policy_loader)
                changed = restart_only_changes(runtime.policy, policy)
                if changed:
                    raise ConfigError(f"{', '.join(changed)} changed: these settings need a restart "
                                      f"(the running policy is unchanged)")
                generation = await _build_generation(runtime, policy)
            except ModuleNotFoundError as exc:  # e.g. a NER model named without the ner extra installed
                missing = missing_extra(exc, "the new policy")
                if missing is None:
                    return self._internal_fault(exc)
                runtime.last_reload_error = str(missing)
                self._outcomes.labels("failed").inc()
                log.error("policy reload failed, keeping policy generation %d: %s", runtime.generation, missing)
                return False
            except KvfenceError as exc:
                runtime.last_reload_error = _one_line(str(exc))
                self._outcomes.labels("failed").inc()
                log.error("policy reload failed, keeping policy generation %d: %s", runtime.generation,
                          runtime.last_reload_error)
                return False
            except Exception as exc:  # an internal fault: logged with its traceback, the old policy stays
                return self._internal_fault(exc)
            retired = [state for name, state in runtime.backends.items() if generation.backends.get(name) is not state]
            runtime.make_current(generation)
            # requests in flight may still use a retired backend's pool: it is closed once the longest of
            # them would have timed out (or with the runtime, whichever comes first)
            for state in retired:
                runtime._retired.append(state.client)
                self._close_later(state.client, state.config.read_timeout_s + RETIRE_GRACE_S)
            runtime.last_reload_error = None
            self._outcomes.labels("ok").inc()
            self._generation.set(runtime.generation)
            log.warning("policy reloaded: generation %d, %d backend(s), %d tenant(s), %d hook(s)",
                        runtime.generation, len(policy.backends), len(policy.tenants), len(generation.hooks))
            return True

    def _close_later(self, client: Any, delay_s: float) -> None:
        async def close() -> bool:
            await asyncio.sleep(delay_s)
            if client in self.runtime._retired:
                self.runtime._retired.remove(client)
                await client.aclose()
            return True

        task = asyncio.get_running_loop().create_task(close())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _internal_fault(self, exc: BaseException) -> bool:
        self.runtime.last_reload_error = f"internal error: {type(exc).__name__}: {exc}"
        self._outcomes.labels("failed").inc()
        log.error("policy reload failed (internal error), keeping policy generation %d", self.runtime.generation,
                  exc_info=exc)
        return False

    async def aclose(self) -> None:
        self.remove_signal_handler()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _one_line(message: str) -> str:
    """The loader's problems (one per line) as one log line."""
    head, *rest = message.splitlines() or [""]
    return " ".join([head, "; ".join(line.strip() for line in rest)]).strip() if rest else head


async def _build_generation(runtime: GatewayRuntime, policy: Policy) -> GatewayRuntime:
    tenants = [GatewayTenant.from_config(t) for t in policy.tenants]
    accounts = UpstreamAccounts(policy.backends, tenants, os.environ)
    old = {state.config.name: state for state in runtime.backends.values()}
    counters: dict[str, TokenCounter] = {}
    backends: dict[str, BackendState] = {}
    fresh: list[BackendState] = []
    for config in policy.backends:
        kept = old.get(config.name)
        if kept is not None and kept.config == config:
            backends[config.name] = kept  # its pool, capacity and up/down state carry over
            counters[config.name] = kept.counter
            continue
        counter = (kept.counter if kept is not None and kept.config.tokenizer == config.tokenizer
                   else await asyncio.to_thread(load_counter, config.tokenizer, runtime.base_dir))
        facts = config.facts
        state = BackendState(config, make_upstream_client(config), counter,
                             CapacityInfo(facts.advertised_context, facts.kv_capacity_tokens, "policy"))
        backends[config.name] = state
        counters[config.name] = counter
        fresh.append(state)
    hooks = _reload_hooks(runtime, policy)
    generation = runtime.generation_for(policy, accounts=accounts, counters=counters, hooks=hooks, backends=backends)
    if fresh:
        try:
            await generation.refresh_backends(fresh)
        except BaseException:
            for state in fresh:
                await state.client.aclose()
            raise
    return generation


def _reload_hooks(runtime: GatewayRuntime, policy: Policy) -> list[Any]:
    """The hooks of the new generation: protection rebuilt for the new policy (sharing its leak index,
    key and metrics), other hooks (``gateway.hooks``, a restart-only setting) as they are."""
    if not policy.gateway.load_protection:
        return list(runtime.hooks)
    from kvfence.gateway.protection import reload_protection_hooks

    return reload_protection_hooks(policy, runtime.hooks, incidents=runtime.audit, registry=runtime.metrics.registry)
