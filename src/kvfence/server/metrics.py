"""Prometheus metrics of the server, in their own registry.

Request counters are labelled by the tenant's organisation; prefix-cache hits by a short,
non-reversible scope id (never the scope key itself: keys do not belong in dashboards) together with
the organisation the scope belongs to, so an operator can see that hits stay inside organisations
(I1, I6). Those labels tell who uses the server and how much, so callers without the metrics key
read :meth:`ServerMetrics.render` ``per_tenant=False``: every series summed over them
(see :mod:`kvfence.server.auth.metrics_access`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvfence.engine.interface import EngineStats
from kvfence.metrics_key import summed_away

__all__ = ["TENANT_LABELS", "ServerMetrics", "scope_label"]

_MAX_KNOWN_SCOPES = 100_000
# Labels that name or single out a tenant; the aggregate view sums them away.
TENANT_LABELS = frozenset({"organization", "scope"})


def scope_label(scope_key: bytes) -> str:
    """A 16-hex-digit id of a scope key: stable, short, and useless for computing the key."""
    return hashlib.blake2b(scope_key, digest_size=8, person=b"kvf-metric").hexdigest()


class _EngineCollector(Collector):
    """Reads the engine-thread stats snapshot at scrape time."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        stats = self._m.stats_source() if self._m.stats_source is not None else None
        if stats is None:
            return
        for name, doc, value in (
            ("kvfence_kv_pages_used", "KV-cache pages in use (owned or cached-and-referenced).", stats.num_used_pages),
            ("kvfence_kv_pages_free", "KV-cache pages free or evictable.", stats.num_free_pages),
            ("kvfence_kv_pages_total", "KV-cache pages in the pool.", stats.num_pages),
            ("kvfence_queue_length", "Requests waiting to be scheduled.", stats.num_waiting),
            ("kvfence_running_requests", "Requests being prefilled or decoded.", stats.num_running),
        ):
            yield GaugeMetricFamily(name, doc, value=float(value))
        yield CounterMetricFamily("kvfence_preemptions", "Sequences preempted by recompute.",
                                  value=float(stats.num_preemptions))
        yield CounterMetricFamily("kvfence_rope_recomputes",
                                  "Sequences recomputed because their rotary embedding changed with their length.",
                                  value=float(stats.num_rope_recomputes))
        yield CounterMetricFamily("kvfence_isolation_incidents",
                                  "Isolation violations caught (request aborted, never answered).",
                                  value=float(stats.isolation_incidents))
        hits = CounterMetricFamily("kvfence_prefix_cache_hit_tokens",
                                   "Prompt tokens served from the prefix cache, by cache scope.",
                                   labels=["scope", "organization"])
        for key, tokens in sorted(stats.prefix_hit_tokens_by_scope.items()):
            hits.add_metric([scope_label(key), self._m.organization_of(key)], float(tokens))
        yield hits


class _AggregateView(Collector):
    """The server's registry as seen without the metrics key: no tenant label anywhere."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            yield summed_away(family, TENANT_LABELS, "organizations")


class ServerMetrics:
    """All metrics of one server instance."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.stats_source: Callable[[], EngineStats] | None = None
        self._scope_orgs: OrderedDict[bytes, str] = OrderedDict()
        r = self.registry
        self.requests = Counter("kvfence_requests", "Finished HTTP generation requests.",
                                ["organization", "endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("kvfence_prompt_tokens", "Prompt tokens processed.", ["organization"],
                                     registry=r)
        self.cached_prompt_tokens = Counter("kvfence_cached_prompt_tokens",
                                            "Prompt tokens served from the tenant's own prefix cache.",
                                            ["organization"], registry=r)
        self.generation_tokens = Counter("kvfence_generation_tokens", "Tokens generated.", ["organization"],
                                         registry=r)
        self.rejections = Counter("kvfence_rejections", "Requests refused, by reason.", ["reason"], registry=r)
        self.in_flight = Gauge("kvfence_requests_in_flight", "Requests admitted and not finished.", registry=r)
        self.ttft = Histogram("kvfence_time_to_first_token_seconds", "Time to first token.",
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.latency = Histogram("kvfence_request_latency_seconds", "End-to-end generation latency.",
                                 buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120), registry=r)
        self.cache_config = Gauge("kvfence_cache_config_info", "KV cache configuration (value is 1).",
                                  ["page_size", "num_pages", "pool_tokens", "max_model_len", "cache_scope", "scrub"],
                                  registry=r)
        r.register(_EngineCollector(self))
        self._aggregate = CollectorRegistry(auto_describe=False)
        self._aggregate.register(_AggregateView(r))

    def remember_scope(self, scope_key: bytes, organization: str) -> None:
        """Record which organisation a scope key belongs to (bounded), for the hit metric label."""
        self._scope_orgs[scope_key] = organization
        self._scope_orgs.move_to_end(scope_key)
        while len(self._scope_orgs) > _MAX_KNOWN_SCOPES:
            self._scope_orgs.popitem(last=False)

    def organization_of(self, scope_key: bytes) -> str:
        return self._scope_orgs.get(scope_key, "unknown")

    def render(self, *, per_tenant: bool = True) -> bytes:
        """The Prometheus text exposition; ``per_tenant=False`` sums away every tenant label."""
        return generate_latest(self.registry if per_tenant else self._aggregate)
