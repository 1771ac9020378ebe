"""The native runner: the model over the paged KV pool on the CPU with numpy and the C++ kernels, no torch.

The surface :class:`~kvfence.engine.core.engine_core.EngineCore` uses of
:class:`~kvfence.engine.runner.model_runner.ModelRunner`, and the same pool:
``[layers, K|V, num_pages + 1, page_size, kv_heads, head_dim]`` with the null page last, stored as
float32, bfloat16 (``uint16``) or float16. Invariant I2 is enforced as there, through the same
function (:func:`~kvfence.engine.runner.scrub.scrub_released`): :meth:`NativeRunner.execute`,
:meth:`~NativeRunner.read_pages` and :meth:`~NativeRunner.write_page` zero-fill the ledger's scrub
list first and touch no pool while a page is still owed its zero-fill.

A step is one ``kvfence_decode_step_f32`` call over every layer (or a few, for many rows): each layer
writes all the step's K/V rows into the pool before any row attends, so a prefill chunk runs as rows
too, row ``t`` of a chunk from position ``p`` attending to the slots of positions ``[begin, p + t + 1)``
of its own block table (I1); ``begin`` is 0 or the sliding window's start. Every row of a sequence
reads one copy of that sequence's slots (the view's row stride is 0, each row's bounds are offsets
into the step's slot list). The final norm and the LM head run for the rows that sample, and for the
prompt rows of requests that ask for prompt log-probabilities (a slice of rows at a time).
"""

from __future__ import annotations

import ctypes
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kvfence.engine.config import ModelConfig
from kvfence.engine.core.scheduler import ScheduledSeq
from kvfence.engine.kernels.loading import (
    MIN_PARALLEL_WEIGHTS,
    TILED_MIN_ROWS,
    WEIGHT_KINDS,
    KvDecoderLayer,
    KvDecodeView,
    KvLayerAttention,
    KvLinear,
)
from kvfence.engine.layers.rope_lengths import rope_lengths
from kvfence.engine.native.dtypes import STORAGE, widen
from kvfence.engine.native.kernels import native_kernels, ptr
from kvfence.engine.native.memory import packed_empty
from kvfence.engine.native.rope import Rope
from kvfence.engine.native.weights import load_weights, unsupported
from kvfence.engine.runner.scrub import ScrubLedger, page_runs, scrub_released
from kvfence.engine.sampling.prompt_logprobs import positions_to_score, score_positions_numpy
from kvfence.errors import ConfigError

if TYPE_CHECKING:
    from kvfence.engine.sampling.prompt_logprobs import PromptScores

__all__ = ["MAX_ROWS_PER_CALL", "NativeRunner"]

log = logging.getLogger(__name__)

MAX_ROWS_PER_CALL = 256
"""Most rows one step-kernel call runs; more run as consecutive calls (the K/V of the earlier ones is
in the pool by then, so causality holds). Bounds the kernel's per-thread scratch (about 7 MB at
256 rows of the SmolLM-135M shape), which stays allocated between steps."""


@dataclass(frozen=True)
class _Device:
    """What callers read of a torch device: the native runtime runs on the CPU."""

    type: str = "cpu"

    def __str__(self) -> str:
        return self.type


class NativeRunner:
    """Owns the weights (numpy) and the KV pool; runs a step's forward pass in the C++ kernels.

    ``dtype``: the model dtype (``"float32"``, ``"bfloat16"``, ``"float16"``): how the matrix weights
    are stored, every sum in float32; ``kv_dtype`` the pool's. ``ledger`` is the page ledger whose
    scrub list this runner zero-fills before each pool access (I2). ``num_threads``: the kernels' threads.

    What this runtime does not run (see :func:`~kvfence.engine.native.weights.unsupported`) is a
    :class:`ConfigError` naming it; the kernels failing to build or their self-check too.
    """

    def __init__(
        self,
        model_dir: Path,
        cfg: ModelConfig,
        *,
        max_len: int,
        num_pages: int,
        page_size: int,
        dtype: str,
        kv_dtype: str,
        ledger: ScrubLedger,
        num_threads: int,
    ) -> None:
        problems = unsupported(cfg)
        for name, value in (("dtype", dtype), ("kv_cache_dtype", kv_dtype)):
            if value not in STORAGE:
                problems.append(f"{name} {value!r} (the native runtime stores {', '.join(STORAGE)})")
        if kv_dtype != "float32" and cfg.head_dim % 8:
            problems.append(f"a {kv_dtype} KV pool with head_dim {cfg.head_dim} (a multiple of 8 is needed)")
        if num_threads < 1:
            problems.append(f"num_threads={num_threads}")
        if problems:
            raise ConfigError(f"the native runtime does not run {'; '.join(problems)}: use --runtime torch")
        self.cfg = cfg
        self.ledger = ledger
        self.device = _Device()
        self.dtype = dtype
        self.kv_dtype = kv_dtype
        self.max_len = max_len
        self.page_size = page_size
        self.num_pages = num_pages
        self.num_threads = num_threads
        self._kernels = native_kernels()
        self._lib = self._kernels.lib
        self.weights = load_weights(model_dir, cfg, dtype)
        layers, heads, kv, d = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        (self.kv_pool,) = packed_empty([((layers, 2, num_pages + 1, page_size, kv, d), STORAGE[kv_dtype])])
        self.kv_pool.fill(0)  # written now, as the torch runner's: a server that starts holds its whole pool
        self.null_page = num_pages
        self.scrubbed_pages = 0  # pages zero-filled so far (I2), and the time it took: the cost of isolation
        self.scrub_seconds = 0.0
        self._rope = Rope(d, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings)
        self._window = cfg.sliding_window
        self._full_layers = cfg.full_attention_layers if cfg.sliding_window is not None else frozenset()
        kind = WEIGHT_KINDS[dtype]
        eps = cfg.rms_norm_eps
        self._layer_blocks = []
        for w in self.weights.layers:
            def lin(weight: np.ndarray, bias: np.ndarray | None) -> KvLinear:
                return KvLinear(ptr(weight), ptr(bias), None, weight.shape[0], weight.shape[1], kind)

            self._layer_blocks.append(KvDecoderLayer(
                lin(w.qkv, w.qkv_bias), lin(w.o, w.o_bias), lin(w.gate_up, w.gate_up_bias), lin(w.down, w.down_bias),
                ptr(w.input_norm), ptr(w.post_norm), eps, cfg.hidden_size, heads, kv, d, MIN_PARALLEL_WEIGHTS,
                TILED_MIN_ROWS, ptr(w.q_norm), ptr(w.k_norm),
            ))
        self._layers = (ctypes.c_void_p * layers)(*(ctypes.addressof(b) for b in self._layer_blocks))
        scale = cfg.attention_scale or d**-0.5
        num_slots = (num_pages + 1) * page_size
        self._attention = (KvLayerAttention * layers)(*(
            KvLayerAttention(ptr(self.kv_pool[i, 0]), ptr(self.kv_pool[i, 1]), num_slots, WEIGHT_KINDS[kv_dtype],
                             1 if i in self._full_layers else 0, scale)
            for i in range(layers)
        ))
        log.info("native runtime: %s weights (%.0f MB), %s KV pool of %d pages (%.0f MB), %d threads, kernels %s",
                 dtype, self.weights.nbytes / 1e6, kv_dtype, num_pages, self.pool_bytes / 1e6, num_threads,
                 self._kernels.library)

    @property
    def pool_bytes(self) -> int:
        return int(self.kv_pool.nbytes)

    @property
    def page_nbytes(self) -> int:
        """Bytes of one page's payload (every layer, K and V), as :meth:`read_pages` returns it."""
        return int(self.kv_pool[:, :, 0].nbytes)

    def kv_layout(self) -> dict[str, int | str]:
        """The pool geometry a peer must share for pages to mean the same thing."""
        layers, _, _, page_size, heads, head_dim = self.kv_pool.shape
        return {"layers": int(layers), "kv_heads": int(heads), "head_dim": int(head_dim),
                "page_size": int(page_size), "dtype": self.kv_dtype}

    # ---- I2 ----------------------------------------------------------------------------------

    def scrub_released(self) -> None:
        """Zero-fill every page on the ledger's scrub list now (I2); the pool holds no stale page after.

        Runs first in :meth:`execute`, :meth:`read_pages` and :meth:`write_page`."""
        scrub_released(self.ledger, self.scrub)

    def scrub(self, pages: list[int]) -> None:
        """Zero-fill ``pages`` in every layer, K and V (invariant I2)."""
        if not pages:
            return
        start = time.perf_counter()
        for first, last in page_runs(pages):
            self.kv_pool[:, :, first : last + 1] = 0
        self.scrubbed_pages += len(pages)
        self.scrub_seconds += time.perf_counter() - start

    def pages_are_zero(self, pages: list[int]) -> bool:
        """Whether ``pages`` are all zero in the pool right now (a check: it scrubs nothing)."""
        return not pages or not bool(self.kv_pool[:, :, pages].any())

    # ---- page bytes, for the disaggregated handoff (I4) --------------------------------------

    def read_pages(self, page_ids: list[int]) -> list[memoryview]:
        """The current bytes of ``page_ids``, one read-only view per page, each in the pool's layout
        ``[layers, K|V, page_size, kv_heads, head_dim]`` and dtype."""
        self.scrub_released()  # I2
        if not page_ids:
            return []
        pages = np.ascontiguousarray(np.moveaxis(self.kv_pool[:, :, page_ids], 2, 0))  # [n, L, 2, ps, H, D]
        flat = pages.reshape(-1).view(np.uint8).data.toreadonly()
        size = len(flat) // len(page_ids)
        return [flat[i * size : (i + 1) * size] for i in range(len(page_ids))]

    def write_page(self, page_id: int, payload: bytes) -> None:
        """Overwrite one page (all layers, K and V) with ``payload``; its size must be exact."""
        expected = self.page_nbytes
        if len(payload) != expected:
            raise ValueError(f"page payload has {len(payload)} bytes, the pool's pages have {expected}")
        if not 0 <= page_id < self.num_pages:
            raise IndexError(f"page {page_id} is not one of the pool's {self.num_pages} pages")
        self.scrub_released()  # I2: a page owed its zero-fill is zeroed before, never after, the payload lands
        target = self.kv_pool[:, :, page_id]
        target[...] = np.frombuffer(payload, dtype=self.kv_pool.dtype).reshape(target.shape)

    # ---- forward -----------------------------------------------------------------------------

    def execute(
        self, items: list[ScheduledSeq], prompt_scores: dict[str, PromptScores] | None = None
    ) -> tuple[list[ScheduledSeq], np.ndarray]:
        """Run one mixed batch; return the items that sample and their float32 logits [N, vocab].

        With ``prompt_scores`` given, the prompt positions of requests that ask for prompt
        log-probabilities are scored too (:func:`~kvfence.engine.sampling.prompt_logprobs.score_positions_numpy`),
        keyed by request id. The pages on the ledger's scrub list are zero-filled first (I2)."""
        self.scrub_released()
        self._kernels.set_threads(self.num_threads)  # OpenMP's count is per thread: this step's thread
        ordered = [it for it in items if it.num_new_tokens == 1] + [it for it in items if it.num_new_tokens != 1]
        sampled = [it for it in ordered if it.samples]
        if not ordered:
            return sampled, np.empty((0, self.cfg.vocab_size), dtype=np.float32)
        batch = self._batch(ordered, scores=prompt_scores is not None)
        hidden = self._layers_forward(batch)
        if prompt_scores is not None:
            for it, row, span in batch.to_score:
                prompt_scores[it.seq.request_id] = score_positions_numpy(
                    self._logits, hidden[row : row + len(span)], it.seq, span
                )
        if not sampled:
            return sampled, np.empty((0, self.cfg.vocab_size), dtype=np.float32)
        return sampled, self._logits(np.ascontiguousarray(hidden[batch.sample_rows]))

    def _batch(self, ordered: list[ScheduledSeq], *, scores: bool) -> _Batch:
        ps, window = self.page_size, self._window
        ids, positions, mapping, sample_rows = [], [], [], []
        to_score: list[tuple[ScheduledSeq, int, range]] = []  # item, its first scored row, positions
        by_length = self._rope.length_threshold is not None  # dynamic NTK: rotated for the sequence's length
        rope_lens: list[int] = []
        slot_lists, begins, begins_full, ends = [], [], [], []
        offset = rows = 0
        for it in ordered:
            start, n = it.start, it.num_new_tokens
            context = start + n
            if n < 1 or start < 0 or context > len(it.seq.token_ids) or context > self.max_len:
                raise ValueError(f"request {it.seq.request_id}: positions {start}..{context} cannot be scheduled")
            table = np.asarray(it.seq.block_table[: -(-context // ps)], dtype=np.int64)
            if table.size * ps < context or (table.size and (table.min() < 0 or table.max() >= self.num_pages)):
                raise IndexError(f"request {it.seq.request_id}: its block table does not map positions 0..{context} "
                                 "to pages of the pool")
            slots = (table[:, None] * ps + np.arange(ps, dtype=np.int64)).reshape(-1)[:context]
            pos = np.arange(start, context, dtype=np.int64)
            ids.extend(it.seq.token_ids[start:context])
            positions.append(pos)
            mapping.append(slots[start:context])
            slot_lists.append(slots)
            ends.append(offset + pos + 1)
            begins_full.append(np.full(n, offset, dtype=np.int64))
            begins.append(offset + np.maximum(pos + 1 - window, 0) if window is not None else begins_full[-1])
            offset += context
            if by_length:
                rope_lens.extend(rope_lengths(it.seq.rope_length, start, context))
            if scores and (span := positions_to_score(it.seq, start, n)):
                to_score.append((it, rows + span.start - start, span))
            rows += n
            if it.samples:
                sample_rows.append(rows - 1)
        return _Batch(
            np.asarray(ids, dtype=np.int64), np.concatenate(positions), np.concatenate(mapping),
            np.concatenate(slot_lists), np.concatenate(begins), np.concatenate(begins_full), np.concatenate(ends),
            np.asarray(rope_lens, dtype=np.int64) if by_length else None, sample_rows, to_score,
        )

    def _layers_forward(self, batch: _Batch) -> np.ndarray:
        """Hidden states [T, hidden] after every layer, the step's K/V written into the pool."""
        w = self.weights
        x = widen(w.embed[batch.ids])  # [T, hidden] float32
        cos, sin = self._rope.rows(batch.positions, batch.rope_lens)
        rows = x.shape[0]
        out = np.empty_like(x)
        views = (KvDecodeView * 2)()
        half = self.cfg.head_dim // 2
        for s in range(0, rows, MAX_ROWS_PER_CALL):
            e = min(rows, s + MAX_ROWS_PER_CALL)
            begin, begin_full, end = batch.begin[s:e], batch.begin_full[s:e], batch.end[s:e]  # contiguous slices
            views[0] = KvDecodeView(ptr(batch.slots), 0, ptr(begin), ptr(end))
            views[1] = KvDecodeView(ptr(batch.slots), 0, ptr(begin_full), ptr(end))
            status = self._lib.kvfence_decode_step_f32(
                self._layers, self._attention, len(self._layer_blocks), views, ptr(x[s:e]), e - s, x.shape[1],
                ptr(cos[s:e]), ptr(sin[s:e]), half, ptr(batch.slot_mapping[s:e]), ptr(out[s:e]), self.num_threads,
            )
            if status == 1:
                raise IndexError("a K/V slot outside the pool")
            if status != 0:
                raise RuntimeError(f"the step kernel refused the layers' head layout (status {status})")
        return out

    def _logits(self, hidden: np.ndarray) -> np.ndarray:
        """Final RMSNorm, then the LM head (the embedding where tied): float32 [N, vocab]."""
        hidden = np.ascontiguousarray(hidden)
        n, dim = hidden.shape
        normed = np.empty_like(hidden)
        self._lib.kvfence_rms_norm_f32(ptr(hidden), n, dim, dim, ptr(self.weights.norm), self.cfg.rms_norm_eps,
                                       ptr(normed), self.num_threads)
        head = self.weights.head
        logits = np.empty((n, head.shape[0]), dtype=np.float32)
        self._lib.kvfence_linear_typed(ptr(normed), n, dim, ptr(head), WEIGHT_KINDS[self.dtype], head.shape[0], dim,
                                       None, ptr(logits), MIN_PARALLEL_WEIGHTS, self.num_threads, TILED_MIN_ROWS, None)
        return logits


@dataclass(frozen=True)
class _Batch:
    """One step's rows (decodes, then prefill chunks) and what each reads: row ``r`` attends to
    ``slots[begin[r] : end[r]]`` (``begin_full``: the full-attention layers' start)."""

    ids: np.ndarray
    positions: np.ndarray
    slot_mapping: np.ndarray
    slots: np.ndarray
    begin: np.ndarray
    begin_full: np.ndarray
    end: np.ndarray
    rope_lens: np.ndarray | None  # the sequence length each row is rotated for, where RoPE depends on it
    sample_rows: list[int]
    to_score: list[tuple[ScheduledSeq, int, range]]  # prompt log-probabilities: item, first row, positions
