"""The prefill side of disaggregated serving: run prompts, hand their KV pages over (I4).

One process, one model, its own KV pool and page ledger. It listens on a ZeroMQ ROUTER socket;
decode workers connect with a DEALER socket and talk the messages of :mod:`kvfence.disagg.wire`.

Per request: admission (I3) runs on SUBMIT, before anything is allocated; a request that cannot
run is answered with an explicit REJECT and never becomes a placeholder. An admitted request is
prefilled in continuous batches (chunked prefill, scoped prefix cache); in the step that samples
its first token, the worker re-checks I1 for its block table, captures every prompt page with
its ledger generation, and only then releases the pages (scrubbed, I2). The MANIFEST, the PAGEs
and the COMMIT go out after that; any fault sends an ABORT instead.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import secrets
import threading
from dataclasses import dataclass
from typing import Any

import zmq

from kvfence.disagg.handoff import SentPage, build_manifest
from kvfence.disagg.kv_pages import ChecksumPool, model_identity
from kvfence.disagg.protocol import PROTOCOL_VERSION, expected_page_count, key_proof, submit_mac
from kvfence.disagg.wire import Message, MessageKind, WireError, decode, encode
from kvfence.engine.config import EngineConfig
from kvfence.engine.core.engine_core import EngineCore
from kvfence.engine.core.requests import banned_until_min_tokens
from kvfence.engine.core.scheduler import Scheduler
from kvfence.engine.core.sequence import Sequence
from kvfence.engine.kv.block_manager import PageState
from kvfence.engine.sampling.sample_rows import Generator, SampledToken, SampleRow
from kvfence.engine.sampling.sampling_params import SamplingParams
from kvfence.errors import ConfigError, InvalidParameterError, IsolationViolation, RequestError

__all__ = ["PrefillWorker"]

log = logging.getLogger(__name__)

_IDLE_POLL_MS = 100


@dataclass
class _Job:
    identity: bytes
    request_id: str
    prompt: list[int]
    params: SamplingParams  # the client's real parameters (the scheduler sees max_tokens=1)
    scope_key: bytes
    generator: Generator | None
    banned_until_min_tokens: list[int]
    logprobs: None = None  # the first token's logprobs travel in the manifest, not on the job

    def sample_row(self) -> SampleRow:
        """The first token is sampled with the client's real parameters (the scheduler's say max_tokens=1)."""
        p = self.params
        # The first token has no output yet; the repetition penalty also counts the prompt.
        prompt = self.prompt if p.repetition_penalty != 1.0 else ()
        return SampleRow(p, self.generator, 0, self.banned_until_min_tokens, (), prompt)


class PrefillWorker:
    """Runs prompts and hands their KV pages to decode workers; drive it with :meth:`serve`."""

    def __init__(self, config: EngineConfig, *, listen: str, key: bytes = b"") -> None:
        # The engine's step, with a hook that captures each request's pages between its first
        # token and their release.
        self.core = EngineCore(config)
        self.runner = self.core.runner
        self.block_manager = self.core.block_manager
        self.key = key
        self.instance_id = secrets.token_hex(8)
        self.page_nbytes = self.runner.page_nbytes
        self._identity = model_identity(self.core.model_dir)
        self._jobs: dict[str, _Job] = {}
        self._checksums = ChecksumPool()
        self._context = zmq.Context()
        self.socket = self._context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.socket.setsockopt(zmq.SNDHWM, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        try:
            self.socket.bind(listen)
        except zmq.ZMQError as exc:  # a port in use, a bad path: what to change, not a traceback
            self.close()
            hint = "; choose another --listen" if exc.errno == zmq.EADDRINUSE else ""
            raise ConfigError(f"cannot listen on {listen}: {exc.strerror}{hint}") from exc
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.num_handoffs = 0
        self.num_rejected = 0
        self.num_aborted = 0

    @property
    def scheduler(self) -> Scheduler:
        return self.core.scheduler

    @property
    def engine(self) -> EngineCore:
        """The engine core this worker drives (its pool, ledger and step)."""
        return self.core

    def close(self) -> None:
        self._checksums.close()
        self.socket.close(0)
        self._context.term()

    # ---- loop --------------------------------------------------------------------------------

    def serve(self, stop: threading.Event | None = None) -> None:
        """Handle messages and run prefill steps until ``stop`` is set."""
        while stop is None or not stop.is_set():
            busy = self.scheduler.has_unfinished()
            if self.socket.poll(0 if busy else _IDLE_POLL_MS):
                self._drain()
            if self.scheduler.has_unfinished():
                self.step()

    def _drain(self) -> None:
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            identity, rest = frames[0], frames[1:]
            try:
                message = decode(rest)
            except WireError as exc:
                log.warning("dropping a malformed message: %s", exc)
                continue
            try:
                self._handle(identity, message)
            except Exception:  # one bad message must not take the worker (and every request) down
                log.exception("handling a %s message failed", message.kind.name)
                rid = message.request_id
                if rid is not None and message.kind is MessageKind.SUBMIT:
                    self._abort(_job_id(identity, rid))
                    self._send(identity, MessageKind.ABORT, {"request_id": rid, "reason": "internal error"})

    def _handle(self, identity: bytes, message: Message) -> None:
        if message.kind is MessageKind.HELLO:
            self._send(identity, MessageKind.WELCOME, self.welcome())
        elif message.kind is MessageKind.SUBMIT:
            self._submit(identity, message.fields)
        elif message.kind is MessageKind.ABORT and message.request_id is not None:
            self._abort(_job_id(identity, message.request_id))
        else:
            log.warning("ignoring unexpected %s message", message.kind.name)

    def welcome(self) -> dict[str, Any]:
        cap = self.core.capacity
        return {
            "protocol": PROTOCOL_VERSION,
            "instance_id": self.instance_id,
            "model_name": self.core.model_name,
            "model_identity": self._identity,
            "is_random_weights": self.core.is_random_weights,
            "vocab_size": self.core.model_config.vocab_size,
            "layout": self.runner.kv_layout(),
            "page_nbytes": self.page_nbytes,
            "max_model_len": cap.max_model_len,
            "num_pages": cap.num_pages,
            "page_size": cap.page_size,
            "scrub": cap.scrub,
            "key_proof": key_proof(self.key, self.instance_id).hex(),
        }

    # ---- admission (I3): before anything is allocated ----------------------------------------

    def _submit(self, identity: bytes, fields: dict[str, Any]) -> None:
        request_id = fields.get("request_id")
        if not isinstance(request_id, str) or not request_id:
            log.warning("SUBMIT without a request id dropped")
            return
        job_id = _job_id(identity, request_id)
        try:
            # I4/I5: only a peer holding the handoff key may have prompts computed under a scope key
            # and read back their KV (and, through the manifest, which pages were prefix hits).
            mac = fields.get("mac")
            if not isinstance(mac, str) or not hmac.compare_digest(mac, submit_mac(fields, self.key)):
                raise InvalidParameterError("the request is not signed with this worker's handoff key",
                                            param="mac")
            job = self._parse(identity, request_id, fields)
            if job_id in self._jobs:
                raise InvalidParameterError(f"request id {request_id!r} is already in use", param="request_id")
            # I3: the real max_tokens decides, although this side only computes the prompt.
            self.scheduler.check_admissible(len(job.prompt), job.params.max_tokens)
            local = dataclasses.replace(job.params, max_tokens=1, min_tokens=0, stop=[], stop_token_ids=[])
            self.scheduler.add(Sequence(job_id, job.prompt, job.scope_key, local))
        except RequestError as exc:
            self.num_rejected += 1
            log.info("request %s rejected before allocation: %s", request_id, exc)
            self._send(identity, MessageKind.REJECT, {
                "request_id": request_id,
                "error": {"type": type(exc).__name__, "message": exc.message, "param": exc.param, "code": exc.code},
            })
            return
        self._jobs[job_id] = job

    def _parse(self, identity: bytes, request_id: str, fields: dict[str, Any]) -> _Job:
        prompt = fields.get("prompt_token_ids")
        vocab = self.core.model_config.vocab_size
        if not isinstance(prompt, list) or not prompt:
            raise InvalidParameterError("the prompt must contain at least one token", param="prompt")
        if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab for t in prompt):
            raise InvalidParameterError(f"a prompt token id is outside the vocabulary [0, {vocab})", param="prompt")
        raw_params = fields.get("params")
        if not isinstance(raw_params, dict):
            raise InvalidParameterError("missing sampling parameters", param="params")
        names = {f.name for f in dataclasses.fields(SamplingParams)}
        unknown = sorted(set(raw_params) - names)
        if unknown:
            raise InvalidParameterError(f"unknown sampling parameters {unknown}", param="params")
        params = SamplingParams(**raw_params)
        if params.max_tokens == 0:  # this side always samples the first token (the decode side's first)
            raise InvalidParameterError("max_tokens must be at least 1 in disaggregated mode", param="max_tokens")
        try:
            scope_key = bytes.fromhex(str(fields.get("scope_key", "")))
        except ValueError:
            scope_key = b""
        if not scope_key:
            raise InvalidParameterError("scope_key must be a non-empty hex string", param="scope_key")
        generator = None
        if params.seed is not None:
            generator = self.core.runtime.generator(params.seed)
        banned = banned_until_min_tokens(params, self.core.tokenizer.eos_token_ids)
        return _Job(identity, request_id, list(prompt), params, scope_key, generator, banned)

    def _abort(self, job_id: str) -> None:
        if self._jobs.pop(job_id, None) is not None:
            self.core.abort(job_id)  # pages released and zero-filled (I2)

    # ---- one prefill step --------------------------------------------------------------------

    def step(self) -> None:
        """One :meth:`EngineCore.step`; each request's pages are captured when its first token is
        sampled, before the step releases (and zero-fills) them, and handed over after."""
        outgoing: list[tuple[_Job, list[list[bytes | memoryview]]]] = []

        def capture(seq: Sequence, token: SampledToken) -> None:
            job = self._jobs[seq.request_id]
            outgoing.append((job, self._capture(seq, job, token.token_id, token.logprobs)))

        result = self.core.step(self._jobs, before_release=capture)
        failed = [(job, "internal error in the prefill worker") for seq in result.failed
                  if (job := self._jobs.pop(seq.request_id, None)) is not None]
        failed += [(job, "isolation check failed on the prefill side") for seq in result.incidents
                   if (job := self._jobs.pop(seq.request_id, None)) is not None]
        for job, messages in outgoing:
            if self._jobs.pop(_job_id(job.identity, job.request_id), None) is None:
                continue  # aborted after its capture (an incident): nothing of it leaves
            self.num_handoffs += 1
            for frames in messages:
                self._send_frames(job.identity, frames)
        self._send_failures(failed)

    def _capture(
        self, seq: Sequence, job: _Job, first_token: int, logprobs: dict[int, float] | None
    ) -> list[list[bytes | memoryview]]:
        """The handoff messages of one request, built while its pages are still its own (I4)."""
        self.block_manager.verify(seq)  # I1 on the sending side: only its own or same-scope pages
        num_pages = expected_page_count(seq.num_prompt_tokens, self.block_manager.page_size)
        table = seq.block_table[:num_pages]
        if len(table) != num_pages:
            raise IsolationViolation(f"request {job.request_id!r} holds {len(table)} pages, needs {num_pages}")
        infos = [self.block_manager.page_info(p) for p in table]
        payloads = self.runner.read_pages(table)
        pages = [
            SentPage(page_id=i.page_id, generation=i.generation, shared=i.state is PageState.CACHED, payload=data)
            for i, data in zip(infos, payloads, strict=True)
        ]
        state = None if job.generator is None else self.core.runtime.generator_state(job.generator)
        manifest = build_manifest(
            request_id=job.request_id, sender_id=self.instance_id, prompt_token_ids=job.prompt,
            scope_key=job.scope_key, page_size=self.block_manager.page_size, pages=pages,
            first_token=first_token, first_logprobs=logprobs, generator_state=state, key=self.key,
            map_fn=self._checksums.map,
        )
        messages = [encode(MessageKind.MANIFEST, manifest.to_wire())]
        for entry, page in zip(manifest.pages, pages, strict=True):
            messages.append(encode(MessageKind.PAGE, {
                "request_id": job.request_id, "index": entry.index,
                "page_id": entry.page_id, "generation": entry.generation,
            }, [page.payload]))
        messages.append(encode(MessageKind.COMMIT, {"request_id": job.request_id, "page_count": len(pages)}))
        return messages

    # ---- sending -----------------------------------------------------------------------------

    def _send_failures(self, failed: list[tuple[_Job, str]]) -> None:
        for job, reason in failed:
            self.num_aborted += 1
            self._send(job.identity, MessageKind.ABORT, {"request_id": job.request_id, "reason": reason})

    def _send(self, identity: bytes, kind: MessageKind, fields: dict[str, Any]) -> None:
        self._send_frames(identity, encode(kind, fields))

    def _send_frames(self, identity: bytes, frames: list[bytes | memoryview]) -> None:
        try:
            self.socket.send_multipart([identity, *frames], copy=False)
        except zmq.ZMQError as exc:  # the decode worker went away: its requests die with it
            log.warning("cannot reach decode worker %s: %s", identity.hex(), exc)


def _job_id(identity: bytes, request_id: str) -> str:
    return f"{identity.hex()}/{request_id}"
