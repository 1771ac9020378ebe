"""Prometheus metrics of the gateway, on a registry of its own (one per app instance).

Series labelled by tenant (:data:`TENANT_LABELS`) are shown only to the holder of the metrics key
(``gateway.metrics_key_file``); everyone else reads them summed over tenants
(:func:`without_tenants`), as ``kvfence serve`` does for organisations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from kvfence.metrics_key import summed_away

__all__ = ["TENANT_LABELS", "GatewayMetrics", "without_tenants"]

# Labels that name a tenant; the view without the metrics key sums them away.
TENANT_LABELS = frozenset({"tenant"})


def without_tenants(exposition: bytes) -> bytes:
    """A Prometheus text exposition with every tenant label summed away (``_created``: the earliest)."""
    families = list(text_string_to_metric_families(exposition.decode("utf-8")))
    return generate_latest(_Families([summed_away(f, TENANT_LABELS, "tenants") for f in families]))  # type: ignore[arg-type]


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)

_MS_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class GatewayMetrics:
    """Counters and gauges served at ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("kvfence_gateway_requests", "Requests by outcome.",
                                ["endpoint", "data_class", "backend", "status"], registry=r)
        self.rejections = Counter("kvfence_gateway_rejections", "Requests refused by the gateway, by reason.",
                                  ["reason"], registry=r)
        self.fallbacks = Counter("kvfence_gateway_fallbacks", "Requests retried on another allowed backend.",
                                 ["from_backend", "to_backend"], registry=r)
        self.class_raised = Counter("kvfence_gateway_class_raised",
                                    "Requests whose class was raised by a header or a hook.", ["to_class"],
                                    registry=r)
        self.tokens_cut = Counter("kvfence_gateway_tokens_trimmed", "Prompt tokens cut to fit the cap.",
                                  registry=r)
        self.salts_stripped = Counter("kvfence_gateway_client_salts_stripped",
                                      "Client-sent cache salts removed (I5).", registry=r)
        self.overhead = Histogram("kvfence_gateway_overhead_seconds",
                                  "Time the gateway itself adds to a request.", buckets=_MS_BUCKETS, registry=r)
        self.upstream_latency = Histogram("kvfence_gateway_upstream_seconds",
                                          "Time to upstream response headers.", ["backend"], registry=r)
        self.backend_up = Gauge("kvfence_gateway_backend_up", "1 if the backend answered recently.",
                                ["backend"], registry=r)
        self.advertised_context = Gauge("kvfence_gateway_backend_advertised_context_tokens",
                                        "Context the backend advertises (0 = unknown).", ["backend"], registry=r)
        self.kv_capacity = Gauge("kvfence_gateway_backend_kv_capacity_tokens",
                                 "KV-cache capacity of the backend (0 = unknown).", ["backend"], registry=r)
        self.over_advertised = Gauge("kvfence_gateway_backend_context_exceeds_capacity",
                                     "1 if the backend advertises more context than its KV cache holds.",
                                     ["backend"], registry=r)
        self.in_flight = Gauge("kvfence_gateway_in_flight", "Requests being served.", registry=r)
        # A plain count, read when /metrics is scraped: the request path adds and subtracts on the
        # event loop's thread only, so it needs no lock (Gauge.inc/dec take one, twice per request).
        self.requests_in_flight = 0
        self.in_flight.set_function(lambda: self.requests_in_flight)
        self.leaks = Counter("kvfence_gateway_leak_suspected",
                             "Answers withheld as suspected cross-tenant leaks.", registry=r)
        self.tokens = Counter("kvfence_gateway_tokens",
                              "Tokens charged to tenants' tokens_per_minute limits, by kind (prompt, completion) "
                              "and source (count: the gateway's tokenizer or approximation; usage: the backend's).",
                              ["tenant", "kind", "source"], registry=r)
        self._request_children: dict[tuple[str, str, str, int], Any] = {}
        self._token_children: dict[tuple[str, str, str], Any] = {}
        self._upstream_children: dict[str, Any] = {}

    def count_request(self, endpoint: str, data_class: str, backend: str, status: int) -> None:
        """``requests{...}.inc()`` with the labelled child kept: ``labels()`` costs more than the
        increment itself, once per request."""
        key = (endpoint, data_class, backend, status)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.requests.labels(endpoint, data_class, backend, str(status))
        child.inc()

    def count_tokens(self, tenant: str, kind: str, source: str, tokens: int) -> None:
        """``tokens{tenant, kind, source}.inc(tokens)`` with the labelled child kept."""
        key = (tenant, kind, source)
        child = self._token_children.get(key)
        if child is None:
            child = self._token_children[key] = self.tokens.labels(tenant, kind, source)
        child.inc(tokens)

    def observe_upstream(self, backend: str, seconds: float) -> None:
        """``upstream_latency{backend}.observe(seconds)`` with the labelled child kept."""
        child = self._upstream_children.get(backend)
        if child is None:
            child = self._upstream_children[backend] = self.upstream_latency.labels(backend)
        child.observe(seconds)
