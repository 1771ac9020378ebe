"""``DisaggregatedEngine``: the decode worker, with the same interface as ``LLMEngine``.

Prompts are prefilled by a separate prefill worker process (spawned, or reached over ZeroMQ);
this process owns its own KV pool, receives each request's pages, and decodes. Invariant I4 is
enforced here: a request's pages are allocated only after its manifest checked out, and the
request is decoded (or answered at all, even its first token) only after every page's checksum
was recomputed from the bytes really in this pool. Anything else — a REJECT, an ABORT, a wrong
count, a stale generation, a replayed manifest, a corrupted byte, a timeout, a lost worker —
retires the request: its pages are released and zero-filled (I2) at once, and it finishes with
``finish_reason="abort"`` and an error, never with an answer.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from kvfence.disagg.config import DisaggConfig
from kvfence.disagg.handoff import Expectation, HandoffPhase, HandoffReceiver, SenderLedgerView
from kvfence.disagg.kv_pages import ChecksumPool, model_identity
from kvfence.disagg.protocol import (
    PROTOCOL_VERSION,
    HandoffError,
    HandoffFailure,
    Manifest,
    key_proof,
    submit_mac,
)
from kvfence.disagg.spawn import WorkerProcess
from kvfence.disagg.wire import Message, MessageKind, WireError, decode, encode
from kvfence.engine.config import EngineConfig
from kvfence.engine.core.engine_core import EngineCore
from kvfence.engine.core.outputs import EngineStats, RequestOutput
from kvfence.engine.core.requests import RequestState, advance_text, check_params, check_prompt
from kvfence.engine.core.scheduler import Scheduler
from kvfence.engine.core.sequence import FinishReason, Sequence
from kvfence.engine.kv.capacity import Capacity
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import (
    CapacityError,
    ConfigError,
    ContextLengthExceededError,
    InvalidParameterError,
    IsolationViolation,
)

__all__ = ["DisaggRequestOutput", "DisaggStats", "DisaggregatedEngine", "run_to_completion"]

log = logging.getLogger(__name__)

_IDLE_POLL_S = 0.02  # longest a step() blocks on the socket when there is nothing to decode
_DRAIN_BUDGET_S = 0.05  # longest a step() spends on handoff traffic before it decodes


# One output type for every engine: RequestOutput carries ``error`` / ``error_reason`` itself.
DisaggRequestOutput = RequestOutput


@dataclass
class DisaggStats(EngineStats):
    """``EngineStats`` of the decode pool plus the handoff counters (I4)."""

    num_handoffs_pending: int = 0
    num_handoffs_verified: int = 0
    num_prefill_rejections: int = 0
    handoff_failures: dict[str, int] = field(default_factory=dict)


@dataclass
class _Request(RequestState):
    scope_key: bytes = b""
    # handoff state, until decoding starts
    receiver: HandoffReceiver | None = None
    deadline: float = 0.0
    buffered: dict[int, bytes] = field(default_factory=dict)
    allocated: bool = False


class DisaggregatedEngine:
    """Decode worker with a verified KV handoff from a prefill worker (I4). Drive from one thread."""

    serves_prompt_only = False  # the prefill worker always samples the first token: max_tokens >= 1

    def __init__(self, config: DisaggConfig | EngineConfig) -> None:
        if isinstance(config, EngineConfig):
            config = DisaggConfig(engine=config)
        self.config = config
        # The decode pool: the model runner, its page ledger and scheduler, and the step every engine runs.
        self.core = EngineCore(config.engine)
        self.runner = self.core.runner
        self.block_manager = self.core.block_manager
        self.tokenizer = self.core.tokenizer
        self.model_name = self.core.model_name
        self.is_random_weights = self.core.is_random_weights
        self.model_config = self.core.model_config
        self.model_dir = self.core.model_dir
        self.page_nbytes = self.runner.page_nbytes
        self._requests: dict[str, _Request] = {}
        self._ready: list[RequestOutput] = []
        self._ledger = SenderLedgerView()
        self._checksums = ChecksumPool()
        self.num_handoffs_verified = 0
        self.num_prefill_rejections = 0
        self.handoff_failures: dict[str, int] = {}
        self._failed_requests: list[tuple[str, BaseException]] = []
        self.worker: WorkerProcess | None = None
        self._context = zmq.Context()
        self.socket = self._context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        self._monitor: zmq.Socket[Any] | None = None
        self._last_probe = 0.0
        try:
            self._connect()
        except BaseException:
            self.close()
            raise
        self._monitor = self.socket.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        self.core.limit_max_model_len(self.capacity.max_model_len)  # what both pools can hold (I3)

    @property
    def scheduler(self) -> Scheduler:
        return self.core.scheduler

    @property
    def max_num_seqs(self) -> int:
        return self.config.engine.max_num_seqs

    @property
    def isolation_incidents(self) -> int:
        """I1/I4 violations: paranoid-mode aborts and handoff pages that were not fresh pages of their own."""
        return self.core.isolation_incidents

    # ---- connection ----------------------------------------------------------------------------

    def _connect(self) -> None:
        cfg = self.config
        if cfg.prefill_address is None:
            self.key = cfg.handoff_key if cfg.handoff_key is not None else secrets.token_bytes(32)
            self.worker = WorkerProcess(cfg.prefill or cfg.engine, key=self.key, startup_timeout_s=cfg.connect_timeout_s)
            address = self.worker.endpoint
        else:
            self.key = cfg.handoff_key or b""
            address = cfg.prefill_address
            if not self.key:  # I4: unkeyed checksums and MACs are plain digests anybody can compute
                log.warning("UNSAFE: no handoff key for the prefill worker at %s: whoever can reach or replace "
                            "it can forge manifests and pages", address)
        self.prefill_address = address
        if cfg.prefill_address is not None:  # requests get 503 until then: say what the server waits for
            log.info("waiting up to %.0f s for the prefill worker at %s", cfg.connect_timeout_s, address)
        self.socket.connect(address)
        self.socket.send_multipart(encode(MessageKind.HELLO, {"protocol": PROTOCOL_VERSION}))
        deadline = time.monotonic() + cfg.connect_timeout_s
        while True:
            if self.worker is not None and self.worker.exit_code() is not None:
                raise ConfigError(f"the prefill worker exited while connecting:\n{self.worker.log_tail()}")
            if time.monotonic() > deadline:
                raise ConfigError(f"no answer from the prefill worker at {address} within {cfg.connect_timeout_s:.0f} s")
            if not self.socket.poll(100):
                continue
            try:
                message = decode(self.socket.recv_multipart())
            except WireError as exc:
                raise ConfigError(f"the prefill worker at {address} speaks another protocol: {exc}") from exc
            if message.kind is MessageKind.WELCOME:
                self._accept_welcome(message.fields)
                return

    def _accept_welcome(self, w: dict[str, Any]) -> None:
        self.sender_id, self.capacity, self.prefill_num_pages = self._check_welcome(w)
        log.info("connected to prefill worker %s at %s (max_model_len %d)", self.sender_id, self.prefill_address,
                 self.capacity.max_model_len)

    def _check_welcome(self, w: dict[str, Any]) -> tuple[str, Capacity, int]:
        """Refuse a prefill worker whose pages would not mean the same thing here (or cannot hold I3)."""
        mine = model_identity(self.core.model_dir)
        if w.get("model_identity") != mine:
            raise ConfigError(f"the prefill worker runs another model ({w.get('model_name')!r}); both sides need the same checkpoint")
        if w.get("layout") != self.runner.kv_layout() or w.get("page_nbytes") != self.page_nbytes:
            raise ConfigError(f"KV page layout differs: prefill {w.get('layout')}, decode {self.runner.kv_layout()}")
        instance_id = str(w.get("instance_id"))
        if w.get("key_proof") != key_proof(self.key, instance_id).hex():
            raise ConfigError("the prefill worker uses a different handoff key")
        local = self.core.capacity
        prefill_len = int(w["max_model_len"])
        prefill_pool = int(w["num_pages"]) * int(w["page_size"])
        # I3 across both pools: the advertised context is what BOTH sides can hold.
        limit = min(local.max_model_len, prefill_len, prefill_pool)
        if limit < local.max_model_len and self.config.engine.max_model_len != "auto":
            raise CapacityError(
                f"the decode side advertises max_model_len={local.max_model_len} but the prefill worker "
                f"holds only {min(prefill_len, prefill_pool)} tokens (its max_model_len {prefill_len}, pool "
                f"{prefill_pool}); lower --max-model-len, use --max-model-len auto, or enlarge the prefill pool"
            )
        # the decode side's pool and prefix-cache budget; a lower context only leaves the budget more room
        capacity = replace(local, max_model_len=limit, scrub=local.scrub and bool(w.get("scrub")))
        return instance_id, capacity, int(w["num_pages"])

    def _watch_connection(self) -> None:
        """ZeroMQ reconnects by itself when a prefill worker restarts at the same address; greet it."""
        monitor = self._monitor
        while monitor is not None and monitor.poll(0):
            event = recv_monitor_message(monitor)
            if event["event"] == zmq.EVENT_CONNECTED:
                log.warning("(re)connected to %s; asking the prefill worker who it is", self.prefill_address)
                self._send(MessageKind.HELLO, {"protocol": PROTOCOL_VERSION})
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                log.error("lost the connection to the prefill worker at %s", self.prefill_address)

    def _probe(self) -> None:
        """Ask the worker who it is (at most once a second): a WELCOME from a new instance is adopted."""
        now = time.monotonic()
        if now - self._last_probe >= 1.0:
            self._last_probe = now
            self._send(MessageKind.HELLO, {"protocol": PROTOCOL_VERSION})

    def _on_welcome(self, w: dict[str, Any]) -> None:
        """A restarted worker: adopt it if it can serve what this engine advertises, else refuse it."""
        if str(w.get("instance_id")) == self.sender_id:
            return
        try:
            sender_id, capacity, num_pages = self._check_welcome(w)
            if capacity.max_model_len < self.capacity.max_model_len:
                raise CapacityError(f"it holds {capacity.max_model_len} tokens, this engine advertises {self.capacity.max_model_len}")
        except (ConfigError, CapacityError) as exc:
            log.error("refusing the restarted prefill worker %s: %s (every request will fail until it is fixed)",
                      w.get("instance_id"), exc)
            return
        old = self.sender_id
        for req in self._pending():  # their SUBMITs went to a process that is gone
            if req.receiver is not None:
                self._fail(req, req.receiver.fail(HandoffFailure.WORKER_LOST, "the prefill worker restarted"))
        self._ledger.forget_sender(old)
        self.sender_id, self.prefill_num_pages = sender_id, num_pages
        log.warning("prefill worker %s replaced by %s", old, sender_id)

    def close(self) -> None:
        """Stop the spawned prefill worker (if any) and close the socket."""
        if self.worker is not None:
            self.worker.close()
        self._checksums.close()
        if self._monitor is not None:
            self.socket.disable_monitor()
            self._monitor.close(0)
        self.socket.close(0)
        self._context.term()

    def __enter__(self) -> DisaggregatedEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- requests ------------------------------------------------------------------------------

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, scope_key: bytes) -> None:
        """Submit a request to the prefill worker. Raises before anything is allocated anywhere (I3)."""
        if request_id in self._requests or self.scheduler.get(request_id) is not None:
            raise InvalidParameterError(f"request id {request_id!r} is already in use", param="request_id")
        vocab = self.model_config.vocab_size
        check_prompt(prompt_token_ids, vocab, scope_key)
        check_params(params, vocab, self.core.runtime)  # one choice per request, logit-bias ids in the vocabulary
        if params.logits_processors:
            # The first token is sampled on the prefill worker, which cannot run a caller's code.
            raise InvalidParameterError(
                "logits processors (structured outputs) are not supported in disaggregated mode",
                param="logits_processors",
            )
        if params.prompt_logprobs is not None:
            # The prompt is computed on the prefill worker, whose handoff carries KV pages and the
            # first token only, not a score per prompt position.
            raise InvalidParameterError(
                "prompt_logprobs (and completions echo with logprobs) are not supported in disaggregated mode",
                param="prompt_logprobs",
            )
        if params.max_tokens == 0:  # the prefill worker always samples the first token
            raise InvalidParameterError("max_tokens 0 is not supported in disaggregated mode", param="max_tokens")
        self.scheduler.check_admissible(len(prompt_token_ids), params.max_tokens)  # I3, decode pool
        total = len(prompt_token_ids) + params.max_tokens
        if self.block_manager.pages_needed(total) > self.prefill_num_pages:
            raise ContextLengthExceededError(
                f"the request needs {total} tokens of KV cache but the prefill worker's pool holds "
                f"{self.prefill_num_pages * self.block_manager.page_size}; shorten the prompt or lower max_tokens",
                param="max_tokens",
            )
        if self.worker is not None and self.worker.exit_code() is not None:
            raise HandoffError(HandoffFailure.WORKER_LOST, f"the prefill worker exited with code {self.worker.exit_code()}")
        # Pages are allocated under a one-off staging scope, so the fresh pages can never be a
        # prefix-cache hit that other requests share: the payload is written into them.
        seq = Sequence(request_id, prompt_token_ids, secrets.token_bytes(16), params)
        receiver = HandoffReceiver(
            Expectation(request_id, self.sender_id, tuple(prompt_token_ids), scope_key, self.block_manager.page_size,
                        self.page_nbytes, vocab, self.key),
            self._ledger,
        )
        state = RequestState.create(seq, self.tokenizer, self.core.runtime)
        self._requests[request_id] = _Request(
            seq=seq, detokenizer=state.detokenizer, generator=state.generator, logprobs=state.logprobs,
            banned_until_min_tokens=state.banned_until_min_tokens, scope_key=scope_key, receiver=receiver,
            deadline=time.monotonic() + self.config.handoff_timeout_s,
        )
        submit = {
            "request_id": request_id, "prompt_token_ids": list(prompt_token_ids),
            "params": _params_to_wire(params), "scope_key": scope_key.hex(),
        }
        self._send(MessageKind.SUBMIT, {**submit, "mac": submit_mac(submit, self.key)})  # I4: keyed request

    def abort_request(self, request_id: str) -> None:
        """Abort wherever the request is; its pages are released and zero-filled now (I2)."""
        req = self._requests.pop(request_id, None)
        if req is not None and req.receiver is not None:
            self._send(MessageKind.ABORT, {"request_id": request_id, "reason": "aborted by the client"})
            self._release_handoff(req)
            return
        self.core.abort(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self._ready) or bool(self._pending()) or self.scheduler.has_unfinished()

    def _pending(self) -> list[_Request]:
        return [r for r in self._requests.values() if r.receiver is not None]

    # ---- one iteration -------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Receive handoff traffic, start verified requests, run one decode batch."""
        busy = self.scheduler.has_unfinished() or bool(self._ready)
        timeout = 0.0 if busy else self._idle_timeout()
        self._watch_connection()
        if self.socket.poll(int(timeout * 1000)):
            self._drain()
        self._expire()
        self._place_waiting()
        outputs, self._ready = self._ready, []
        if self.scheduler.has_unfinished():
            try:
                outputs.extend(self._decode_step())
            except Exception:
                # Nothing in the batch ran (a broken device): first tokens and handoff failures
                # already taken from _ready are not lost, the next step() returns them.
                self._ready = outputs + self._ready
                raise
        return outputs

    def _idle_timeout(self) -> float:
        pending = self._pending()
        if not pending:
            return _IDLE_POLL_S
        return max(0.0, min(_IDLE_POLL_S, min(r.deadline for r in pending) - time.monotonic()))

    def _drain(self) -> None:
        # Bounded, so verified requests start decoding (and stream) while others still arrive.
        budget_end = time.monotonic() + _DRAIN_BUDGET_S
        while time.monotonic() < budget_end:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                message = decode(frames)
            except WireError as exc:
                log.error("malformed message from the prefill worker dropped: %s", exc)
                continue
            self._handle(message)

    def _handle(self, message: Message) -> None:
        rid = message.request_id
        req = self._requests.get(rid) if rid is not None else None
        if message.kind is MessageKind.WELCOME:
            self._on_welcome(message.fields)
            return
        if req is None or req.receiver is None:
            # Late traffic of a retired request, or a replay: never attached to anything.
            log.warning("%s for unknown or already-started request %r ignored", message.kind.name, rid)
            return
        try:
            self._advance(req, req.receiver, message)
        except HandoffError as exc:
            self._fail(req, exc)
        except IsolationViolation as exc:
            self.core.isolation_incidents += 1
            self._fail(req, HandoffError(HandoffFailure.BAD_PAGE, str(exc)))
        except Exception as exc:  # an internal fault retires this request, never the engine
            log.exception("handling %s of request %s failed", message.kind.name, rid)
            self._fail(req, HandoffError(HandoffFailure.INTERNAL, f"{type(exc).__name__} while receiving the handoff"))

    def _advance(self, req: _Request, receiver: HandoffReceiver, message: Message) -> None:
        """One protocol message for one request (I4). Raises HandoffError on any mismatch."""
        f = message.fields
        if message.kind is MessageKind.REJECT:
            raw_error = f.get("error")
            error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
            self.num_prefill_rejections += 1
            raise receiver.fail(HandoffFailure.REJECTED, str(error.get("message", "rejected by the prefill worker")))
        if message.kind is MessageKind.ABORT:
            raise receiver.fail(HandoffFailure.SENDER_ABORT, str(f.get("reason", "aborted by the prefill worker")))
        if message.kind is MessageKind.MANIFEST:
            manifest = Manifest.from_wire(f)
            if manifest.sender_id != self.sender_id:
                self._probe()  # another worker instance answers: find out whether it replaced ours
            receiver.on_manifest(manifest)
            self._try_allocate(req)
        elif message.kind is MessageKind.PAGE:
            if len(message.payloads) != 1:
                raise receiver.fail(HandoffFailure.BAD_PAGE, f"a page message has {len(message.payloads)} payloads")
            payload = message.payloads[0]
            entry = receiver.on_page(
                str(f.get("request_id")), _int(f.get("index")), _int(f.get("page_id")), _int(f.get("generation")), len(payload)
            )
            if req.allocated:
                self.runner.write_page(req.seq.block_table[entry.index], payload)
            else:
                req.buffered[entry.index] = payload
        elif message.kind is MessageKind.COMMIT:
            receiver.on_commit(str(f.get("request_id")), _int(f.get("page_count")))
            if req.allocated:
                self._verify_and_start(req, receiver)
        else:
            raise receiver.fail(HandoffFailure.OUT_OF_ORDER, f"unexpected {message.kind.name} message")

    def _try_allocate(self, req: _Request) -> None:
        """Give a request whose manifest checked out fresh, scrubbed pages of this pool (I1, I2)."""
        if req.allocated or not self.block_manager.can_allocate(req.seq):
            return
        self.block_manager.allocate(req.seq)
        req.allocated = True
        self.runner.scrub_released()  # zeroed BEFORE payloads land (I2; write_page would, too)
        table = req.seq.block_table
        if req.seq.num_cached_tokens or any(self.block_manager.page_info(p).owner != req.seq.request_id for p in table):
            raise IsolationViolation(f"handoff pages of {req.seq.request_id!r} are not fresh pages of its own")
        if not self.runner.pages_are_zero(table):
            raise IsolationViolation(f"fresh pages {table} of {req.seq.request_id!r} are not zero")
        for index, payload in sorted(req.buffered.items()):
            self.runner.write_page(table[index], payload)
        req.buffered.clear()

    def _place_waiting(self) -> None:
        """Requests whose manifest verified but found no room: allocate when pages free up (FCFS)."""
        for req in self._pending():
            receiver = req.receiver
            if receiver is None or receiver.phase not in (HandoffPhase.RECEIVING, HandoffPhase.COMMITTED):
                continue
            if req.allocated:
                continue
            try:
                self._try_allocate(req)
                if req.allocated and receiver.phase is HandoffPhase.COMMITTED:
                    self._verify_and_start(req, receiver)
            except HandoffError as exc:
                self._fail(req, exc)
            except IsolationViolation as exc:
                self.core.isolation_incidents += 1
                self._fail(req, HandoffError(HandoffFailure.BAD_PAGE, str(exc)))
            if not req.allocated:
                return  # first come, first served

    def _verify_and_start(self, req: _Request, receiver: HandoffReceiver) -> None:
        """Recompute every checksum from this pool's bytes; only then may anything be answered (I4)."""
        seq = req.seq
        pool_bytes = dict(enumerate(self.runner.read_pages(seq.block_table)))
        receiver.verify(pool_bytes, map_fn=self._checksums.map)
        manifest = receiver.manifest
        if manifest is None:  # verify() succeeded, so this cannot happen; keep the types exact
            raise receiver.fail(HandoffFailure.OUT_OF_ORDER, "verified without a manifest")
        self.num_handoffs_verified += 1
        req.receiver = None
        seq.scope_key = req.scope_key  # from now on the request's own scope (I5) for sealing/recompute
        seq.num_computed_tokens = seq.num_prompt_tokens
        seq.append_token(manifest.first_token)
        if req.generator is not None and manifest.generator_state is not None:
            try:
                self.core.runtime.set_generator_state(req.generator, manifest.generator_state)
            except ValueError:
                log.warning("seeded sampler state of %s not transferable; reseeded", seq.request_id)
        if req.logprobs is not None and manifest.first_logprobs is not None:
            req.logprobs.append(manifest.first_logprobs)
        self.core.add_prefilled(seq)
        self._ready.append(self._progress(req, manifest.first_token))

    def _expire(self) -> None:
        now = time.monotonic()
        lost = self.worker is not None and self.worker.exit_code() is not None
        for req in self._pending():
            receiver = req.receiver
            if receiver is None:
                continue
            if receiver.phase is HandoffPhase.COMMITTED:
                continue  # every byte is here; it only waits for free pages in this pool
            if lost and self.worker is not None:
                self._fail(req, receiver.fail(HandoffFailure.WORKER_LOST, f"the prefill worker exited with code {self.worker.exit_code()}"))
            elif now > req.deadline:
                self._fail(req, receiver.fail(
                    HandoffFailure.TIMEOUT, f"no verified handoff within {self.config.handoff_timeout_s:g} s"))
                self._probe()

    def _fail(self, req: _Request, error: HandoffError) -> None:
        """Retire a request whose handoff failed: tell the worker, scrub its pages, finish with an error."""
        rid = req.seq.request_id
        if req.receiver is not None:
            req.receiver.fail(error.reason, error.message)
        self.handoff_failures[error.reason.value] = self.handoff_failures.get(error.reason.value, 0) + 1
        log.error("request %s retired without an answer: %s", rid, error)
        if error.reason not in (HandoffFailure.REJECTED, HandoffFailure.SENDER_ABORT):
            # Explicit, so a prefill side that still holds the request retires it (a restarted
            # worker may have received the SUBMIT); for one that never saw it, a no-op.
            self._send(MessageKind.ABORT, {"request_id": rid, "reason": error.reason.value})
        self._release_handoff(req)
        self._requests.pop(rid, None)
        req.seq.finish_reason = FinishReason.ABORT
        self._ready.append(self._error_output(req, error.reason, str(error)))

    def _error_output(self, req: _Request, reason: HandoffFailure, message: str) -> RequestOutput:
        """The last output of a request retired without an answer: no token, no text, the reason."""
        return RequestOutput(
            request_id=req.seq.request_id, prompt_token_ids=req.seq.prompt_token_ids, token_ids=[], new_token_ids=[],
            text="", delta_text="", finished=True, finish_reason=FinishReason.ABORT.value,
            num_prompt_tokens=req.seq.num_prompt_tokens, num_cached_tokens=0,
            logprobs=None if req.logprobs is None else [], new_logprobs=None if req.logprobs is None else [],
            error=message, error_reason=reason.value,
        )

    def _release_handoff(self, req: _Request) -> None:
        """Release and zero-fill whatever a handoff touched in this pool (I2), now, not next step."""
        req.buffered.clear()
        if req.allocated:
            self.core.release(req.seq)
            req.allocated = False

    # ---- decoding: the engine's step ---------------------------------------------------------

    def _decode_step(self) -> list[RequestOutput]:
        """One :meth:`EngineCore.step` over the decoding requests (the same step as ``kvfence serve``'s)."""
        result = self.core.step(self._requests)
        outputs: list[RequestOutput] = []
        for seq in result.incidents:  # paranoid mode: aborted, an empty finished output
            if (req := self._requests.pop(seq.request_id, None)) is not None:
                outputs.append(req.output([], "", finished=True))
        error = result.error or RuntimeError("forward pass failed")
        for seq in result.failed:  # fault isolation aborted it alone; the others continue
            rid = seq.request_id
            req = self._requests.pop(rid, None)
            self._failed_requests.append((rid, error))
            if req is not None:  # for callers that read outputs only; the server answers take_failed_requests
                self._ready.append(self._error_output(
                    req, HandoffFailure.INTERNAL, f"the decode forward pass failed on this request ({type(error).__name__})"))
        if result.is_broken and result.error is not None:
            raise result.error  # nothing runs, even alone: not one request's fault
        for rid, token_id in result.sampled.items():
            outputs.append(self._progress(self._requests[rid], token_id))
        return outputs

    def take_failed_requests(self) -> list[tuple[str, BaseException]]:
        """Requests aborted since the last call because the decode forward pass failed on them, with the error."""
        failed, self._failed_requests = self._failed_requests, []
        return failed

    def _progress(self, req: _Request, token_id: int) -> RequestOutput:
        seq = req.seq
        delta = advance_text(req.detokenizer, seq, token_id, self.core.finish)
        if seq.is_finished:
            self._requests.pop(seq.request_id, None)
        return req.output([token_id], delta, finished=seq.is_finished)

    # ---- introspection -------------------------------------------------------------------------

    def stats(self) -> DisaggStats:
        base = self.core.stats(num_waiting=len(self._pending()))
        return DisaggStats(
            **{f.name: getattr(base, f.name) for f in fields(EngineStats)},
            num_handoffs_pending=len(self._pending()), num_handoffs_verified=self.num_handoffs_verified,
            num_prefill_rejections=self.num_prefill_rejections, handoff_failures=dict(self.handoff_failures),
        )

    def free_pages(self) -> list[int]:
        """Pages in the FREE state (not cached prefix pages, not mapped)."""
        return self.core.free_pages()

    def pool_is_zero(self, pages: list[int] | None = None) -> bool:
        """Debug/test helper: True when ``pages`` (default: every free page) are all zero in the pool."""
        return self.core.pool_is_zero(pages)

    def _send(self, kind: MessageKind, fields: dict[str, Any]) -> None:
        try:
            self.socket.send_multipart(encode(kind, fields), zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            log.error("cannot send %s to the prefill worker: %s", kind.name, exc)


def _params_to_wire(params: SamplingParams) -> dict[str, Any]:
    # Plain values only: logits processors are code, refused for this mode in add_request.
    return {f.name: getattr(params, f.name) for f in fields(params) if f.name != "logits_processors"}


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HandoffError(HandoffFailure.BAD_PAGE, f"expected an integer field, got {value!r}")
    return value


def run_to_completion(
    engine: Any, prompts: Iterable[list[int]], params: SamplingParams, scope_key: bytes
) -> list[RequestOutput]:
    """Run prompts through any engine with the ``LLMEngine`` interface; final outputs in order."""
    ids = []
    for i, prompt in enumerate(prompts):
        rid = f"run-{i}-{secrets.token_hex(4)}"
        engine.add_request(rid, prompt, params, scope_key)
        ids.append(rid)
    final: dict[str, RequestOutput] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out
    return [final[rid] for rid in ids]
