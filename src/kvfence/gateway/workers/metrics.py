"""``/metrics`` of several gateway workers: the sum over all of them, whichever worker is asked.

Each worker keeps its own Prometheus registry (nothing on the request path is shared or locked) and
serves it to its siblings on a Unix socket in the supervisor's run directory
(``<run_dir>/metrics-<index>.sock``). The worker the kernel hands a scrape to reads every sibling's
exposition and merges them: counters and histograms are summed, the in-flight gauge is summed,
``*_created`` timestamps take the earliest, and the other gauges (a backend's state or capacity, the
same fact seen by each worker) take the largest. A worker that does not answer within
:data:`PEER_TIMEOUT_S` (being restarted) is left out, and ``kvfence_gateway_workers_reporting`` says
how many were counted. A restarted worker's counters start again from zero, so after a restart the
sums can go down once, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["PEER_TIMEOUT_S", "PeerMetricsServer", "WorkerInfo", "merge_expositions", "merged_worker_metrics"]

PEER_TIMEOUT_S = 1.0
# Gauges whose per-worker values add up to the whole gateway's (the others are one shared fact).
SUMMED_GAUGES = frozenset({"kvfence_gateway_in_flight"})


@dataclass(frozen=True)
class WorkerInfo:
    """Which of the supervisor's workers this process is."""

    index: int
    count: int
    run_dir: Path

    def socket_path(self, index: int) -> Path:
        return self.run_dir / f"metrics-{index}.sock"


def _merge_value(family: str, kind: str, old: float, new: float) -> float:
    if kind == "gauge":
        if family.endswith("_created"):
            return min(old, new)
        return old + new if family in SUMMED_GAUGES else max(old, new)
    return old + new  # counter, histogram, summary, untyped: the workers' counts add up


class _Merged:
    """A collector over the merged families (registered on a throw-away registry to render them)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def merge_expositions(texts: Iterable[str], extra: Iterable[Metric] = ()) -> bytes:
    """One Prometheus text exposition holding the merge of ``texts`` (see the module docstring)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            samples = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                old = samples.get(key)
                samples[key] = sample.value if old is None else _merge_value(
                    family.name, family.type, old, sample.value)
    for name, merged in families.items():
        for (sample_name, labels), value in values[name].items():
            merged.add_sample(sample_name, dict(labels), value)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged([*families.values(), *extra]))  # type: ignore[arg-type]
    return generate_latest(registry)


async def _read_peer(path: Path) -> str | None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), PEER_TIMEOUT_S)
    except (OSError, TimeoutError):
        return None
    try:
        data = await asyncio.wait_for(reader.read(), PEER_TIMEOUT_S)
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return data.decode("utf-8", "replace")


async def merged_worker_metrics(registry: CollectorRegistry, worker: WorkerInfo) -> bytes:
    """This worker's registry merged with every sibling's that answers."""
    own = generate_latest(registry).decode()
    others = [i for i in range(worker.count) if i != worker.index]
    read = await asyncio.gather(*(_read_peer(worker.socket_path(i)) for i in others))
    texts = [own, *(text for text in read if text is not None)]
    reporting = Metric("kvfence_gateway_workers_reporting",
                       "Gateway worker processes whose metrics this scrape sums.", "gauge")
    reporting.add_sample("kvfence_gateway_workers_reporting", {}, float(len(texts)))
    configured = Metric("kvfence_gateway_workers", "Gateway worker processes configured.", "gauge")
    configured.add_sample("kvfence_gateway_workers", {}, float(worker.count))
    return merge_expositions(texts, [reporting, configured])


class PeerMetricsServer:
    """Serves this worker's registry on its Unix socket: connect, read to the end, done."""

    def __init__(self, registry: CollectorRegistry, worker: WorkerInfo,
                 before: Callable[[], None] | None = None) -> None:
        self._registry = registry
        self._before = before  # brings the registry up to date (deferred bookkeeping: quiet_time.py)
        self._path = worker.socket_path(worker.index)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)  # a previous (dead) worker's socket of the same index
        self._server = await asyncio.start_unix_server(self._answer, path=str(self._path))

    async def _answer(self, reader: Any, writer: asyncio.StreamWriter) -> None:
        try:
            if self._before is not None:
                self._before()
            writer.write(generate_latest(self._registry))
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)
