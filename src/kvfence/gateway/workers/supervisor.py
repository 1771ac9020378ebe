"""``kvfence gateway --workers N``: N gateway processes accepting on one port, and their supervisor.

Why several processes: one gateway process serves a burst of requests one after another on one
core (bench/RESULTS.md, "What moved the paced p99"); N processes split a burst across the cores.

How they share the port: on Linux each worker listens on its own socket bound with ``SO_REUSEPORT``
to the same address, and the kernel spreads new connections over them (by a hash of the client's
address and port). The supervisor binds the address first, with the same option and without
listening, so that ``--port 0`` resolves to one port for all and the port stays held while a worker
restarts. Where ``SO_REUSEPORT`` is missing the supervisor listens once and the workers inherit that
socket through ``fork`` (they then compete to accept).

What the supervisor does: forks the workers after it has validated the policy (each worker builds
its own runtime, pools and threads after the fork); restarts a worker that dies (after a short
back-off); stops everything and exits non-zero when a worker fails to start, or when workers die
more than :data:`MAX_DEATHS` times within :data:`DEATH_WINDOW_S` seconds; forwards SIGTERM and
SIGINT to the workers, whose servers then stop gracefully (a second signal cuts the grace period
short, as with one process), and exits once they have; forwards SIGHUP (policy reload) to every worker,
which reloads on its own, after ``on_hangup`` (the CLI validates the file there, so that a worker it
restarts later starts on the newest valid policy). Workers run in their own process group (a
terminal's Ctrl-C reaches the supervisor only, which forwards it once) and get SIGTERM if the
supervisor itself dies.

The state the workers must share (limits, leak fingerprints) is checked before they start
(:mod:`.worker_state`); ``/metrics`` sums over them (:mod:`.worker_metrics`); the audit log takes
every worker's rows (SQLite in WAL mode with a busy timeout, or PostgreSQL).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kvfence.gateway.workers.metrics import WorkerInfo

__all__ = ["DEATH_WINDOW_S", "MAX_DEATHS", "Supervisor", "WorkerSocket", "WorkersFailed"]

log = logging.getLogger("kvfence.gateway.workers.supervisor")

MAX_DEATHS = 5
DEATH_WINDOW_S = 60.0
_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
_POLL_S = 0.05
_PR_SET_PDEATHSIG = 1
_READY = b"R"

# A worker's body: serve on the socket until stopped, return the exit status; ``ready()`` once up.
WorkerMain = Callable[[WorkerInfo, socket.socket, Callable[[], None]], int]


class WorkersFailed(Exception):
    """The workers could not be kept running; ``exit_code`` is the supervisor's exit status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class WorkerSocket:
    """The address every worker accepts on (see the module docstring)."""

    def __init__(self, host: str, port: int, backlog: int = 2048) -> None:
        self.reuse_port = hasattr(socket, "SO_REUSEPORT")
        self.backlog = backlog
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        self.family, self.address = info[0], info[4]
        self._held = self._socket()
        try:
            self._held.bind(self.address)
            self.address = self._held.getsockname()  # port 0 resolved once, for every worker
            if not self.reuse_port:
                self._held.listen(backlog)
                self._held.set_inheritable(True)
        except BaseException:
            self._held.close()  # the port is taken (or not ours): no socket left open behind the error
            raise

    @property
    def port(self) -> int:
        return int(self.address[1])

    def _socket(self) -> socket.socket:
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        return sock

    def for_worker(self) -> socket.socket:
        """The listening socket of one worker (called in the worker, after the fork)."""
        if not self.reuse_port:
            return self._held
        sock = self._socket()
        try:
            sock.bind(self.address)
            sock.listen(self.backlog)
        except BaseException:
            sock.close()
            raise
        self._held.close()  # the worker does not need the supervisor's placeholder
        return sock

    def close(self) -> None:
        self._held.close()


@dataclass
class _Worker:
    index: int
    pid: int
    ready_fd: int
    ready: bool = False
    started_at: float = field(default_factory=time.monotonic)


class Supervisor:
    """Runs ``count`` copies of ``main`` on ``sock`` (see the module docstring)."""

    def __init__(self, count: int, sock: WorkerSocket, main: WorkerMain, *, run_dir: Path | None = None,
                 max_deaths: int = MAX_DEATHS, death_window_s: float = DEATH_WINDOW_S,
                 backoff_s: tuple[float, ...] = _BACKOFF_S, on_hangup: Callable[[], None] | None = None) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        self.count = count
        self.max_deaths = max_deaths
        self.death_window_s = death_window_s
        self.backoff_s = backoff_s
        self.sock = sock
        self.main = main
        self.on_hangup = on_hangup
        self._own_run_dir = run_dir is None
        self.run_dir = Path(tempfile.mkdtemp(prefix="kvfence-gateway-")) if run_dir is None else run_dir
        self.workers: dict[int, _Worker] = {}
        self._deaths: deque[float] = deque()
        self._restart_at: dict[int, float] = {}
        self._restarts: dict[int, int] = {}
        self._signals: list[int] = []
        self._stopping = False

    # -- the supervisor's loop --------------------------------------------------------------------
    def run(self) -> int:
        """Serve until a signal stops the workers; the exit status (raises WorkersFailed)."""
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            for index in range(self.count):
                self._spawn(index)
            while self.workers or (not self._stopping and self._restart_at):
                self._forward_signals()
                self._read_ready()
                self._reap()
                self._restart_due()
                time.sleep(_POLL_S)
            return 0
        except BaseException:
            self._stop_all(signal.SIGTERM)
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for worker in self.workers.values():
                os.close(worker.ready_fd)
            self.sock.close()
            if self._own_run_dir:
                shutil.rmtree(self.run_dir, ignore_errors=True)

    def _on_signal(self, signum: int, frame: object) -> None:
        self._signals.append(signum)

    def _forward_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if signum == signal.SIGHUP:
                if self._stopping:
                    continue
                log.info("supervisor: SIGHUP, %d worker(s) reload the policy", len(self.workers))
                if self.on_hangup is not None:
                    self.on_hangup()
                for worker in self.workers.values():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(worker.pid, signal.SIGHUP)
                continue
            if not self._stopping:
                log.info("supervisor: %s, stopping %d worker(s)", signal.Signals(signum).name, len(self.workers))
            self._stopping = True
            self._restart_at.clear()
            for worker in self.workers.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signum)

    def _read_ready(self) -> None:
        for worker in self.workers.values():
            if not worker.ready:
                try:
                    worker.ready = os.read(worker.ready_fd, 1) == _READY
                except BlockingIOError:
                    continue
                if worker.ready:
                    log.info("worker %d (pid %d) is up", worker.index, worker.pid)

    def _reap(self) -> None:
        for worker in list(self.workers.values()):
            pid, status = os.waitpid(worker.pid, os.WNOHANG)
            if pid == 0:
                continue
            del self.workers[worker.index]
            if not worker.ready:  # one last look: it may have come up just before it died
                with contextlib.suppress(BlockingIOError):
                    worker.ready = os.read(worker.ready_fd, 1) == _READY
            os.close(worker.ready_fd)
            code = os.waitstatus_to_exitcode(status)
            if self._stopping:
                # uvicorn re-raises the stop signal once it has shut down: that is a clean stop too
                if code not in (0, -signal.SIGTERM, -signal.SIGINT):
                    log.warning("worker %d (pid %d) stopped with status %d", worker.index, pid, code)
                continue
            self._died(worker, code)

    def _died(self, worker: _Worker, code: int) -> None:
        how = f"signal {-code}" if code < 0 else f"status {code}"
        if not worker.ready:
            self._stop_all(signal.SIGTERM)
            raise WorkersFailed(f"worker {worker.index} exited with {how} before it was up: the gateway "
                                "did not start", exit_code=code if code > 0 else 1)
        now = time.monotonic()
        self._deaths.append(now)
        while self._deaths and self._deaths[0] < now - self.death_window_s:
            self._deaths.popleft()
        if len(self._deaths) > self.max_deaths:
            self._stop_all(signal.SIGTERM)
            raise WorkersFailed(f"workers keep dying ({len(self._deaths)} deaths in {self.death_window_s:g} s, "
                                f"the last: worker {worker.index} with {how}): giving up")
        # a worker that ran a whole window before dying starts its back-off again
        attempt = 0 if now - worker.started_at > self.death_window_s else self._restarts.get(worker.index, 0)
        delay = self.backoff_s[min(attempt, len(self.backoff_s) - 1)]
        self._restarts[worker.index] = attempt + 1
        log.error("worker %d (pid %d) died with %s; restarting it in %.1f s", worker.index, worker.pid, how, delay)
        self._restart_at[worker.index] = now + delay

    def _restart_due(self) -> None:
        now = time.monotonic()
        for index, when in list(self._restart_at.items()):
            if when <= now:
                del self._restart_at[index]
                self._spawn(index)

    def _stop_all(self, signum: int) -> None:
        """Stop every worker (as on a signal) and wait for them."""
        self._stopping = True
        self._restart_at.clear()
        for worker in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signum)
        for worker in list(self.workers.values()):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(worker.pid, 0)
            os.close(worker.ready_fd)
            del self.workers[worker.index]

    # -- one worker -------------------------------------------------------------------------------
    def _spawn(self, index: int) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the supervisor's code
            code = 1
            try:
                os.close(read_fd)
                code = self._worker(index, write_fd, supervisor)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                log.exception("worker %d failed", index)
            finally:
                logging.shutdown()
                os._exit(code)
        os.close(write_fd)
        self.workers[index] = _Worker(index, pid, read_fd)

    def _worker(self, index: int, ready_fd: int, supervisor: int) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the worker's app takes it (reload)
        os.setpgid(0, 0)  # a terminal's Ctrl-C goes to the supervisor, which forwards it once
        _die_with(supervisor)
        sock = self.sock.for_worker()

        def ready() -> None:
            with contextlib.suppress(OSError):
                os.write(ready_fd, _READY)
                os.close(ready_fd)

        return self.main(WorkerInfo(index, self.count, self.run_dir), sock, ready)


def _die_with(supervisor: int) -> None:
    """Ask Linux to send this worker SIGTERM when the supervisor dies (elsewhere: nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != supervisor:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
