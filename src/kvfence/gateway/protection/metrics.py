"""Prometheus metrics of data protection and leak detection (registered on the gateway's registry)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["ProtectionMetrics"]


class ProtectionMetrics:
    """Counters of findings, actions, blocked requests, detector failures and suspected leaks."""

    def __init__(self, registry: Any = None) -> None:
        if not isinstance(registry, CollectorRegistry):
            registry = CollectorRegistry()
        self.findings = Counter("kvfence_gateway_protection_findings_total",
                                "Detector findings in requests, by entity type and action taken",
                                ["entity", "action"], registry=registry)
        self.blocked = Counter("kvfence_gateway_protection_blocked_total",
                               "Requests refused because a finding's action was block", registry=registry)
        self.class_raised = Counter("kvfence_gateway_protection_class_raised_total",
                                    "Requests whose data class a finding raised", ["to_class"], registry=registry)
        self.detector_failures = Counter("kvfence_gateway_detector_failures_total",
                                         "Requests refused because a detector failed or timed out (fail closed)",
                                         registry=registry)
        # The gateway counts withheld answers (kvfence_gateway_leak_suspected_total); this says which
        # detector caught them (ngram or canary).
        self.leaks = Counter("kvfence_gateway_protection_leak_detections_total",
                             "Suspected cross-tenant leaks caught, by detector", ["detector"], registry=registry)
        self.scan_seconds = Histogram("kvfence_gateway_protection_scan_seconds",
                                      "Time to scan and pseudonymise one request", registry=registry,
                                      buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0))
