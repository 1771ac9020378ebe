"""Gateway data protection and cross-tenant leak detection (DESIGN.md, "Data minimisation").

The gateway calls :func:`build_hooks` once at start-up with the validated policy; it returns the
:class:`~kvfence.gateway.protection.hook.ProtectionHook` (or nothing when ``gateway.protection.enabled``
is false). Three concerns, each a sub-package of pure parts usable on their own:

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
from typing import TYPE_CHECKING, Any

from kvfence.errors import ConfigError

if TYPE_CHECKING:
    from kvfence.gateway.policy.schema import Policy
    from kvfence.gateway.protection.hook import ProtectionHook

__all__ = ["build_hooks", "build_protection_hook"]

log = logging.getLogger("kvfence.gateway.protection")


def _secret_key(policy: Policy, needs_shared: bool) -> bytes:
    value = os.environ.get(policy.gateway.secret_env)
    if value:
        return ("kvfence-protection\x00" + value).encode()
    if needs_shared:
        raise ConfigError(f"leak detection with a Redis index needs a secret shared by every replica: set "
                          f"the environment variable {policy.gateway.secret_env}")
    log.warning("%s is not set: leak fingerprints use a random per-process key", policy.gateway.secret_env)
    return secrets.token_bytes(32)


def build_protection_hook(policy: Policy, *, incidents: Any, registry: Any = None) -> ProtectionHook | None:
    """The protection hook for ``policy`` (``None`` when protection is disabled)."""
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
    monitor = None
    if leak.enabled:
        key = _secret_key(policy, needs_shared=leak.index == "redis")
        index: FingerprintIndex
        if leak.index == "redis":
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
        monitor = LeakMonitor(index, Fingerprinter(key, leak.ngram), min_run=leak.min_run,
                              max_owners=leak.max_owners, canaries=book)
    detector = build_detector(ner_model=config.ner_model, cache_dir=config.spacy_cache_dir,
                              disabled=config.disabled_rules, timeout_s=config.detector_timeout_s,
                              score_threshold=config.score_threshold, private_ips=config.private_ips)
    return ProtectionHook(policy, config, detector, monitor=monitor, incidents=incidents,
                          metrics=ProtectionMetrics(registry))


def build_hooks(policy: Policy, *, incidents: Any, registry: Any = None) -> list[Any]:
    """Gateway hook factory (see :class:`kvfence.gateway.hooks.HookFactory`)."""
    hook = build_protection_hook(policy, incidents=incidents, registry=registry)
    return [] if hook is None else [hook]
