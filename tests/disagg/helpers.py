"""Helpers for the end-to-end disaggregation tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kvfence.disagg.config import DisaggConfig
from kvfence.disagg.engine import DisaggregatedEngine, DisaggRequestOutput
from kvfence.disagg.handoff import SentPage, build_manifest
from kvfence.disagg.protocol import Manifest
from kvfence.disagg.wire import Message, MessageKind, encode
from kvfence.engine.config import EngineConfig
from kvfence.engine.core.outputs import RequestOutput
from kvfence.engine.core.sequence import Sequence
from kvfence.server.app import create_app
from kvfence.server.config import ServerConfig
from tests.http_server.harness import running_server
from tests.netutil import free_port

KEY = bytes.fromhex("5a" * 32)  # the handoff key of the test prefill workers

__all__ = ["KEY", "AllocationSpy", "decode_config", "drive", "make_engine", "resign_handoff", "serve_disaggregated"]


def decode_config(model_dir: Path, *, kv_cache_tokens: int = 512, max_model_len: int | str = 256, **extra: Any) -> EngineConfig:
    return EngineConfig(model=str(model_dir), kv_cache_tokens=kv_cache_tokens,
                        max_model_len=max_model_len, num_threads=1, **extra)  # type: ignore[arg-type]


def make_engine(model_dir: Path, address: str, *, timeout_s: float = 5.0, key: bytes = KEY, **kw: Any) -> DisaggregatedEngine:
    return DisaggregatedEngine(DisaggConfig(
        engine=decode_config(model_dir, **kw), prefill_address=address, handoff_key=key,
        handoff_timeout_s=timeout_s, connect_timeout_s=30,
    ))


@contextmanager
def serve_disaggregated(model_dir: Path, address: str, *, start_timeout_s: float = 60.0,
                        **engine_kw: Any) -> Iterator[tuple[str, list[DisaggregatedEngine]]]:
    """`kvfence serve` (the real app, on 127.0.0.1) over a disaggregated engine whose prefill worker
    listens at ``address``; yields the base URL and the engines the app made (closed at the end)."""
    engines: list[DisaggregatedEngine] = []

    def factory() -> DisaggregatedEngine:
        engines.append(make_engine(model_dir, address, **engine_kw))
        return engines[-1]

    port = free_port()
    app = create_app(ServerConfig(port=port), factory, secret=b"s" * 32, keyring=None)
    try:
        with running_server(app, graceful_timeout_s=2) as srv:  # kvfence serve's own HTTP server
            base = f"http://127.0.0.1:{srv.port}"
            deadline = time.monotonic() + start_timeout_s
            while True:
                try:
                    if httpx.get(base + "/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the disaggregated test server did not start")
                time.sleep(0.1)
            yield base, engines
    finally:
        for engine in engines:
            engine.close()


def drive(engine: Any, request_ids: list[str], *, timeout_s: float = 60.0) -> dict[str, list[RequestOutput]]:
    """Step until every request finished; every output of each request, in order."""
    outs: dict[str, list[RequestOutput]] = {rid: [] for rid in request_ids}
    deadline = time.monotonic() + timeout_s
    while any(not o or not o[-1].finished for o in outs.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"requests did not finish: {[r for r, o in outs.items() if not o or not o[-1].finished]}")
        for out in engine.step():
            if out.request_id in outs:
                outs[out.request_id].append(out)
    return outs


def assert_error_not_answer(outputs: list[RequestOutput], reason: str) -> DisaggRequestOutput:
    """A failed handoff: exactly one output, finished, 'abort', no token, no text, the reason."""
    assert len(outputs) == 1, outputs
    out = outputs[0]
    assert isinstance(out, DisaggRequestOutput)
    assert out.finished and out.finish_reason == "abort"
    assert out.token_ids == [] and out.new_token_ids == [] and out.text == ""
    assert out.error_reason == reason, out.error
    return out


@dataclass
class AllocationSpy:
    """Records every block table the decode ledger hands out."""

    engine: DisaggregatedEngine
    tables: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        original = self.engine.block_manager.allocate

        def allocate(seq: Sequence) -> None:
            original(seq)
            self.tables[seq.request_id] = list(seq.block_table)

        self.engine.block_manager.allocate = allocate  # type: ignore[method-assign]

    def pages_of(self, request_id: str) -> list[int]:
        return self.tables.get(request_id, [])

    def snapshot(self, pages: list[int]) -> list[bytes]:
        return [bytes(p) for p in self.engine.runner.read_pages(pages)]


def resign_handoff(
    manifest: Manifest, payloads: list[bytes], *, request_id: str | None = None,
    prompt: list[int] | None = None, scope_key: bytes | None = None,
    page_ids: list[tuple[int, int]] | None = None, key: bytes = KEY,
) -> list[list[bytes]]:
    """Rebuild a complete, correctly signed handoff (manifest, pages, commit) with some facts changed.

    This is what a buggy sender holding the key would emit; only the receiver's own checks can
    catch it. ``prompt`` / ``scope_key`` default to values that reproduce the original digests.
    """
    rid = request_id or manifest.request_id
    ids = page_ids or [(e.page_id, e.generation) for e in manifest.pages]
    pages = [SentPage(pid, gen, False, data) for (pid, gen), data in zip(ids, payloads, strict=True)]
    new = build_manifest(
        request_id=rid, sender_id=manifest.sender_id, prompt_token_ids=prompt or [0] * manifest.prompt_len,
        scope_key=scope_key or b"x", page_size=manifest.page_size, pages=pages, first_token=manifest.first_token,
        key=key,
    )
    if prompt is None or scope_key is None:
        from dataclasses import replace

        new = replace(
            new,
            prompt_digest=manifest.prompt_digest if prompt is None else new.prompt_digest,
            scope_digest=manifest.scope_digest if scope_key is None else new.scope_digest,
        ).signed(key)
    frames = [encode(MessageKind.MANIFEST, new.to_wire())]
    for e, p in zip(new.pages, pages, strict=True):
        frames.append(encode(MessageKind.PAGE, {"request_id": rid, "index": e.index, "page_id": e.page_id,
                                                "generation": e.generation}, [p.payload]))
    frames.append(encode(MessageKind.COMMIT, {"request_id": rid, "page_count": len(pages)}))
    return frames


class HandoffBuffer:
    """A MITM hook that holds one request's handoff until its COMMIT, then lets ``rewrite`` emit it."""

    def __init__(self, request_id: str, rewrite: Any) -> None:
        self.request_id = request_id
        self.rewrite = rewrite
        self.manifest: Manifest | None = None
        self.payloads: list[bytes] = []

    def __call__(self, msg: Message, frames: list[bytes]) -> list[list[bytes]]:
        if msg.request_id != self.request_id:
            return [frames]
        if msg.kind is MessageKind.MANIFEST:
            self.manifest = Manifest.from_wire(msg.fields)
            return []
        if msg.kind is MessageKind.PAGE:
            self.payloads.append(msg.payloads[0])
            return []
        if msg.kind is MessageKind.COMMIT and self.manifest is not None:
            result: list[list[bytes]] = self.rewrite(self.manifest, self.payloads)
            return result
        return [frames]
