"""Gateway data protection and cross-tenant leak detection (DESIGN.md, "Data minimisation").

The gateway calls :func:`build_hooks` once at start-up with the validated policy; it returns the
:class:`~kvfence.gateway.protection.hook.ProtectionHook` (or nothing when ``gateway.protection.enabled``
is false). A policy reload calls :func:`reload_protection_hooks`: a new hook for the new policy that keeps
the old one's leak index, key, detector (when its settings are the same) and metrics. Three concerns, each a sub-package of pure parts usable on their own:

- ``detect/``: which spans are personal data or secrets (``recognizers/`` holds the rules), the
  Unicode folding detectors and leak scans see, topics that raise a class;
- ``pseudonymise/``: stable placeholders, restored in whole and streamed answers, in ``logprobs``
  tokens, in each slot's own syntax (prose, a JSON string, a JSON document);
- ``leak/``: keyed n-gram fingerprints of recent prompts, their index, the scan of answers, notices.

Around them: ``messages.py`` (which texts of a request are scanned and rewritten), ``hook.py`` and
``filter.py`` (the gateway hook and one answer choice's filter), ``config.py`` and ``policy_checks.py``
(typed settings, cross-checks), ``metrics.py``, ``cli.py`` (``kvfence gateway incidents``).
"""

from __future__ import annotations

import logging
import os
import secrets
import weakref
from typing import TYPE_CHECKING, Any

from kvfence.errors import ConfigError

if TYPE_CHECKING:
    from kvfence.gateway.policy.schema import Policy
    from kvfence.gateway.protection.hook import ProtectionHook

__all__ = ["build_hooks", "build_protection_hook", "reload_protection_hooks"]

log = logging.getLogger("kvfence.gateway.protection")

# The protection metrics registered on each gateway registry (a registry takes a series name once).
_METRICS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _secret_key(policy: Policy, needs_shared: bool) -> bytes:
    value = os.environ.get(policy.gateway.secret_env)
    if value:
        return ("kvfence-protection\x00" + value).encode()
    if needs_shared:
        raise ConfigError(f"leak detection with a Redis index needs a secret shared by every replica: set "
                          f"the environment variable {policy.gateway.secret_env}")
    log.warning("%s is not set: leak fingerprints use a random per-process key", policy.gateway.secret_env)
    return secrets.token_bytes(32)


# The leak settings a reload cannot change: the index holds fingerprints made under them.
_LEAK_RESTART_ONLY = ("enabled", "ngram", "window_s", "tenant_unit", "index", "redis_url", "redis_prefix",
                      "max_index_entries")
_DETECTOR_FIELDS = ("ner_model", "spacy_cache_dir", "disabled_rules", "detector_timeout_s", "score_threshold",
                    "private_ips")


def build_protection_hook(policy: Policy, *, incidents: Any, registry: Any = None,
                          previous: ProtectionHook | None = None) -> ProtectionHook | None:
    """The protection hook for ``policy`` (``None`` when protection is disabled).

    ``previous``: the hook of the policy in force (a reload): its leak index, fingerprint key, metrics and,
    when the detector settings are unchanged, its detector carry over; leak settings the index depends
    on (``_LEAK_RESTART_ONLY``) must not change."""
    from kvfence.gateway.protection.config import parse_protection_config
    from kvfence.gateway.protection.detect.detector import build_detector
    from kvfence.gateway.protection.hook import ProtectionHook, tenant_unit_of
    from kvfence.gateway.protection.leak.fingerprint import Fingerprinter
    from kvfence.gateway.protection.leak.index import FingerprintIndex, InMemoryIndex, RedisIndex
    from kvfence.gateway.protection.leak.scan import CanaryBook, LeakMonitor
    from kvfence.gateway.protection.metrics import ProtectionMetrics

    config = parse_protection_config(policy.gateway.protection)
    if not config.enabled:
        return None
    leak = config.leak
    kept: _Reloadable | None = getattr(previous, "reload_state", None)
    if kept is not None:
        changed = [f"gateway.protection.leak.{name}" for name in _LEAK_RESTART_ONLY
                   if getattr(kept.config.leak, name) != getattr(leak, name)]
        if changed:
            raise ConfigError(f"{', '.join(changed)} changed: the leak index needs a restart for that")
    monitor = None
    key = kept.key if kept is not None else None
    if leak.enabled:
        if key is None:
            key = _secret_key(policy, needs_shared=leak.index == "redis")
        index: FingerprintIndex
        if kept is not None and kept.monitor is not None:
            index = kept.monitor.index
        elif leak.index == "redis":
            assert leak.redis_url is not None  # checked by LeakConfig
            index = RedisIndex(leak.redis_url, window_s=leak.window_s, prefix=leak.redis_prefix)
        else:
            index = InMemoryIndex(leak.window_s, leak.max_index_entries)
        configured: dict[str, list[str]] = {}
        units: list[str] = []
        for tenant in policy.tenants:
            unit = tenant_unit_of(tenant.organization, tenant.workspace, tenant.name, leak.tenant_unit)
            units.append(unit)
            if tenant.canaries:
                configured.setdefault(unit, []).extend(tenant.canaries)
        # Every tenant's derived canary up front: a worker must name the owner of one injected by another.
        book = (CanaryBook(key, configured, derive_for=units if leak.canaries else ())
                if (leak.canaries or configured) else None)
        fingerprinter = (kept.monitor.fingerprinter if kept is not None and kept.monitor is not None
                         else Fingerprinter(key, leak.ngram))
        monitor = LeakMonitor(index, fingerprinter, min_run=leak.min_run, max_owners=leak.max_owners,
                              common_orgs=leak.common_orgs, canaries=book, withheld_orgs=leak.withheld_orgs)
    if kept is not None and all(getattr(kept.config, f) == getattr(config, f) for f in _DETECTOR_FIELDS):
        detector = kept.detector
    else:
        detector = build_detector(ner_model=config.ner_model, cache_dir=config.spacy_cache_dir,
                                  disabled=config.disabled_rules, timeout_s=config.detector_timeout_s,
                                  score_threshold=config.score_threshold, private_ips=config.private_ips)
    if kept is not None:
        metrics = kept.metrics
    elif registry is not None and registry in _METRICS:  # protection turned off by a reload, then on again
        metrics = _METRICS[registry]
    else:
        metrics = ProtectionMetrics(registry)
        if registry is not None:
            _METRICS[registry] = metrics
    hook = ProtectionHook(policy, config, detector, monitor=monitor, incidents=incidents, metrics=metrics)
    hook.reload_state = _Reloadable(config, key, monitor, detector, metrics)  # type: ignore[attr-defined]
    return hook


class _Reloadable:
    """What a reloaded protection hook takes over from the one before it."""

    def __init__(self, config: Any, key: bytes | None, monitor: Any, detector: Any, metrics: Any) -> None:
        self.config, self.key, self.monitor, self.detector, self.metrics = config, key, monitor, detector, metrics


def reload_protection_hooks(policy: Policy, hooks: list[Any], *, incidents: Any, registry: Any = None) -> list[Any]:
    """``hooks`` with the protection hook rebuilt for ``policy`` (added if protection was off, dropped if it
    is off now); any other hook stays as it is."""
    previous = next((h for h in hooks if getattr(h, "reload_state", None) is not None), None)
    others = [h for h in hooks if h is not previous]
    hook = build_protection_hook(policy, incidents=incidents, registry=registry, previous=previous)
    if hook is None and previous is not None:
        log.warning("policy reload: data protection is now disabled")
    return ([hook] if hook is not None else []) + others


def build_hooks(policy: Policy, *, incidents: Any, registry: Any = None) -> list[Any]:
    """Gateway hook factory (see :class:`kvfence.gateway.hooks.HookFactory`)."""
    hook = build_protection_hook(policy, incidents=incidents, registry=registry)
    return [] if hook is None else [hook]
