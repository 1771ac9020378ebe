"""Several gateway workers, without a gateway: the shared-state checks, the metrics merge, the supervisor."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvfence.gateway.policy.schema import Policy
from kvfence.gateway.records.metrics import GatewayMetrics
from kvfence.gateway.workers.metrics import WorkerInfo, merge_expositions
from kvfence.gateway.workers.shared_state import shared_state_problems, split_limits
from kvfence.gateway.workers.supervisor import Supervisor, WorkersFailed, WorkerSocket


def _policy(*, limits: dict[str, int] | None = None, **gateway: Any) -> Policy:
    return Policy.model_validate({
        "gateway": {"load_protection": False, **gateway},
        "data_classes": [{"name": "public", "allowed_tiers": ["shared"]}],
        "backends": [{"name": "b", "url": "http://127.0.0.1:9/v1", "tier": "shared"}],
        "tenants": [{"name": "t", "key_sha256": "0" * 64, "organization": "o", "default_class": "public",
                     "limits": limits or {}}],
    })


def test_one_worker_needs_nothing_shared() -> None:
    assert shared_state_problems(_policy(limits={"requests_per_minute": 10}), 1) == []


@pytest.mark.parametrize("limit", ["requests_per_minute", "tokens_per_minute", "max_concurrent"])
def test_stateful_limits_without_redis_are_refused_with_workers(limit: str) -> None:
    problems = shared_state_problems(_policy(limits={limit: 10}), 3)
    assert len(problems) == 1
    assert "gateway.redis_url" in problems[0] and "worker_limits: split" in problems[0]
    assert f"t ({limit})" in problems[0] and "3 times" in problems[0]


def test_a_prompt_length_limit_holds_no_state() -> None:
    assert shared_state_problems(_policy(limits={"max_prompt_tokens": 100}), 2) == []


def test_redis_or_an_explicit_split_lets_workers_start() -> None:
    assert shared_state_problems(_policy(limits={"requests_per_minute": 10}, redis_url="redis://127.0.0.1:1/0"), 2) == []
    assert shared_state_problems(_policy(limits={"requests_per_minute": 10}, worker_limits="split"), 2) == []


def test_split_divides_each_stateful_limit_and_keeps_at_least_one() -> None:
    policy = _policy(limits={"requests_per_minute": 10, "tokens_per_minute": 1001, "max_concurrent": 1,
                             "max_prompt_tokens": 50}, worker_limits="split")
    limits = split_limits(policy, 4).tenants[0].limits
    assert (limits.requests_per_minute, limits.tokens_per_minute, limits.max_concurrent) == (2, 250, 1)
    assert limits.max_prompt_tokens == 50  # a per-request cap, not a shared count
    assert split_limits(policy, 1) is policy
    shared = _policy(limits={"requests_per_minute": 10}, redis_url="redis://127.0.0.1:1/0", worker_limits="split")
    assert split_limits(shared, 4) is shared  # Redis shares the whole limit: nothing to split


def test_an_in_process_leak_index_is_refused_with_workers() -> None:
    policy = _policy(load_protection=True)  # protection's defaults: leak detection on, index in memory
    problems = shared_state_problems(policy, 2)
    assert len(problems) == 1 and "leak.index: redis" in problems[0]
    redis = _policy(load_protection=True, protection={"leak": {"index": "redis", "redis_url": "redis://127.0.0.1:1/0"}})
    assert shared_state_problems(redis, 2) == []
    off = _policy(load_protection=True, protection={"leak": {"enabled": False}})
    assert shared_state_problems(off, 2) == []


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode()) for s in family.samples}


def test_merge_sums_counters_histograms_and_in_flight_but_not_backend_facts() -> None:
    from prometheus_client import generate_latest

    workers = [GatewayMetrics(), GatewayMetrics()]
    for i, m in enumerate(workers):
        for _ in range(i + 2):
            m.count_request("chat", "public", "b", 200)
        m.overhead.observe(0.0004 * (i + 1))
        m.requests_in_flight = 3 + i
        m.backend_up.labels("b").set(i)  # worker 0 saw it down, worker 1 up
        m.kv_capacity.labels("b").set(8192)
    merged = _samples(merge_expositions([generate_latest(m.registry).decode() for m in workers]))
    labels = (("backend", "b"), ("data_class", "public"), ("endpoint", "chat"), ("status", "200"))
    assert merged[("kvfence_gateway_requests_total", labels)] == 5
    assert merged[("kvfence_gateway_overhead_seconds_count", ())] == 2
    assert merged[("kvfence_gateway_overhead_seconds_sum", ())] == pytest.approx(0.0012)
    assert merged[("kvfence_gateway_overhead_seconds_bucket", (("le", "0.0005"),))] == 1
    assert merged[("kvfence_gateway_in_flight", ())] == 7
    assert merged[("kvfence_gateway_backend_up", (("backend", "b"),))] == 1
    assert merged[("kvfence_gateway_backend_kv_capacity_tokens", (("backend", "b"),))] == 8192  # not 16384
    created = [merged[k] for k in merged if k[0] == "kvfence_gateway_requests_created"]
    assert created and created[0] <= time.time()


def test_worker_info_names_one_socket_per_worker(tmp_path: Path) -> None:
    info = WorkerInfo(1, 3, tmp_path)
    assert {info.socket_path(i) for i in range(3)} == {tmp_path / f"metrics-{i}.sock" for i in range(3)}


# -- the supervisor, forking this test process's copies of small worker functions -----------------------

def _run(supervisor: Supervisor) -> tuple[int | None, WorkersFailed | None]:
    try:
        return supervisor.run(), None
    except WorkersFailed as exc:
        return None, exc


def test_a_worker_that_fails_before_it_is_up_stops_the_gateway_with_its_status(tmp_path: Path) -> None:
    def main(worker: WorkerInfo, sock: socket.socket, ready: Any) -> int:
        return 4 if worker.index == 1 else (ready(), time.sleep(30), 0)[-1]

    started = time.monotonic()
    code, failed = _run(Supervisor(2, WorkerSocket("127.0.0.1", 0), main, run_dir=tmp_path))
    assert code is None and failed is not None
    assert failed.exit_code == 4 and "before it was up" in str(failed)
    assert time.monotonic() - started < 10  # the healthy worker was stopped, not waited out


def test_workers_that_keep_dying_make_the_supervisor_give_up(tmp_path: Path) -> None:
    deaths = tmp_path / "deaths"
    deaths.mkdir()

    def main(worker: WorkerInfo, sock: socket.socket, ready: Any) -> int:
        ready()
        (deaths / str(os.getpid())).touch()
        time.sleep(0.05)
        return 1

    _, failed = _run(Supervisor(2, WorkerSocket("127.0.0.1", 0), main, run_dir=tmp_path, max_deaths=3,
                                   backoff_s=(0.01,)))
    assert failed is not None and failed.exit_code == 1 and "keep dying" in str(failed)
    assert len(list(deaths.iterdir())) >= 4  # restarted until the limit, then no more


def test_sigterm_reaches_every_worker_and_the_supervisor_exits_zero(tmp_path: Path) -> None:
    stopped = tmp_path / "stopped"
    stopped.mkdir()

    def main(worker: WorkerInfo, sock: socket.socket, ready: Any) -> int:
        got: list[int] = []
        signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
        ready()
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        (stopped / str(worker.index)).write_text(str(got))
        return 0

    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        code, failed = _run(Supervisor(3, WorkerSocket("127.0.0.1", 0), main, run_dir=tmp_path))
    finally:
        timer.cancel()
    assert failed is None and code == 0
    assert sorted(p.name for p in stopped.iterdir()) == ["0", "1", "2"]
    assert all(p.read_text() == f"[{int(signal.SIGTERM)}]" for p in stopped.iterdir())


def test_workers_accept_on_one_port(tmp_path: Path) -> None:
    """Each worker listens on its own socket of the same port; the kernel spreads connections over them."""
    def main(worker: WorkerInfo, sock: socket.socket, ready: Any) -> int:
        ready()
        sock.settimeout(20)
        while True:
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                return 0
            with conn:
                if conn.recv(16) == b"stop":
                    os.kill(os.getppid(), signal.SIGTERM)
                conn.sendall(str(worker.index).encode())

    listening = WorkerSocket("127.0.0.1", 0)
    port = listening.port
    seen: set[str] = set()

    def client() -> None:
        deadline = time.monotonic() + 15
        while len(seen) < 2 and time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
                    conn.sendall(b"who")
                    seen.add(conn.recv(16).decode())
            except OSError:
                time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(b"stop")
            conn.recv(16)

    thread = threading.Thread(target=client)
    thread.start()
    code, failed = _run(Supervisor(2, listening, main, run_dir=tmp_path))
    thread.join()
    assert failed is None and code == 0
    assert seen == {"0", "1"}


def test_check_refuses_workers_that_could_not_share_the_state(tmp_path: Path) -> None:
    import subprocess

    import yaml

    from tests.gateway.conftest import KVFENCE

    policy = _policy(limits={"requests_per_minute": 10}, workers=2).model_dump(mode="json", exclude_none=True)
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(policy))
    refused = subprocess.run([KVFENCE, "gateway", "check", str(config)], capture_output=True, text=True)
    assert refused.returncode == 2 and "gateway.redis_url" in refused.stderr, refused.stderr
    policy["gateway"]["worker_limits"] = "split"
    config.write_text(yaml.safe_dump(policy))
    passed = subprocess.run([KVFENCE, "gateway", "check", str(config)], capture_output=True, text=True)
    assert passed.returncode == 0 and "2 workers" in passed.stdout, passed.stderr


def test_a_taken_port_fails_the_worker_socket_without_leaving_a_socket_open() -> None:
    import gc
    import warnings

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # no SO_REUSEPORT: nobody else may bind this port
    taken.listen()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            with pytest.raises(OSError):
                WorkerSocket("127.0.0.1", taken.getsockname()[1])
            gc.collect()
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    finally:
        taken.close()
