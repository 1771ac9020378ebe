"""Runs the model over the paged KV pool: batch preparation, scrubbing (I2) and the forward pass.

Invariant I2 is enforced here, in one place no caller can skip: every method that reads or writes
the pool (:meth:`ModelRunner.execute`, and :meth:`~ModelRunner.read_pages` /
:meth:`~ModelRunner.write_page` of the disaggregated handoff) first zero-fills the pages on the
page ledger's scrub list, and refuses to touch the pool while any page is still owed its zero-fill.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from kvfence.engine.config import ModelConfig
from kvfence.engine.core.scheduler import ScheduledSeq
from kvfence.engine.kernels import (
    calibrate_linear,
    gemv_kernel_in_use,
    kernel_status,
    tiled_kernel_in_use,
    tiled_kernel_max_rows,
)
from kvfence.engine.kernels.huge_pages import huge_page_zeros
from kvfence.engine.layers.attention import AttentionMetadata, PrefillChunk
from kvfence.engine.layers.rope_lengths import rope_lengths
from kvfence.engine.layers.window_masks import decode_visibility, prefill_mask, window_binds
from kvfence.engine.models.llama import FusedLinear
from kvfence.engine.runner.loader import load_model
from kvfence.engine.runner.scrub import ScrubLedger, page_runs, scrub_released
from kvfence.engine.sampling.prompt_logprobs import PromptScores, positions_to_score, score_positions
from kvfence.errors import ConfigError

__all__ = ["ModelRunner", "ScrubLedger", "resolve_device", "torch_dtype"]

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


def resolve_device(name: str) -> torch.device:
    """The torch device for ``auto``, ``cpu`` or ``cuda[:N]``; a CUDA device this machine lacks is a ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {name!r}") from exc
    if device.type == "cuda":
        # Checked here so that the user reads what to change, not torch's lazy-init traceback.
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {name}: no CUDA device is available here (use --device cpu or auto)")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ConfigError(f"--device {name}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    return device


class ModelRunner:
    """Owns the weights and the KV pool: ``[layers, K|V, num_pages + 1, page_size, kv_heads, head_dim]``.

    The pool's dtype is ``kv_dtype`` (default: the model's ``dtype``); a narrower one stores K/V rounded.

    The extra last page is the *null page*: never handed out, never written, always zero. Padding
    of a batch reads it instead of anybody's page.

    ``ledger`` is the page ledger whose scrub list this runner zero-fills before each pool access (I2).
    """

    def __init__(
        self,
        model_dir: Path,
        cfg: ModelConfig,
        *,
        max_len: int,
        num_pages: int,
        page_size: int,
        dtype: torch.dtype,
        device: torch.device,
        ledger: ScrubLedger,
        kv_dtype: torch.dtype | None = None,
    ) -> None:
        self.cfg = cfg
        self.ledger = ledger
        self.device = device
        self.dtype = dtype
        self.page_size = page_size
        self.num_pages = num_pages
        self.model = load_model(model_dir, cfg, max_len=max_len, dtype=dtype, device=device)
        if device.type == "cpu" and dtype == torch.float32 and kernel_status().enabled:  # built once per machine
            timings = calibrate_linear([m.weight for m in self.model.modules() if isinstance(m, FusedLinear)])
            if timings is not None:
                tiled = "; ".join(
                    f"{rows} rows: torch {t * 1e3:.2f} ms, kernel {k * 1e3:.2f} ms"
                    for rows, t, k in zip(timings.tiled_rows, timings.torch_tiled_s, timings.kernel_tiled_s, strict=True)
                )
                log.info(
                    "decode products, 1 row: torch %.2f ms, kvfence kernel %.2f ms -> %s; %s -> kernel up to %s",
                    timings.torch_gemv_s * 1e3, timings.kernel_gemv_s * 1e3,
                    "kernel" if gemv_kernel_in_use() else "torch", tiled,
                    f"{tiled_kernel_max_rows()} rows, torch above" if tiled_kernel_in_use() else "none (torch)",
                )
        self.kv_pool = huge_page_zeros(  # decode attention streams it: 2 MiB pages where possible
            (cfg.num_hidden_layers, 2, num_pages + 1, page_size, cfg.num_key_value_heads, cfg.head_dim),
            kv_dtype or dtype, device,
        )
        flat = self.kv_pool.view(cfg.num_hidden_layers, 2, -1, cfg.num_key_value_heads, cfg.head_dim)
        self.kv_caches = [(flat[i, 0], flat[i, 1]) for i in range(cfg.num_hidden_layers)]
        self.null_page = num_pages
        self.null_slot = num_pages * page_size
        self.scrubbed_pages = 0  # pages zero-filled so far (I2), and the time it took: the cost of isolation
        self.scrub_seconds = 0.0

    @property
    def pool_bytes(self) -> int:
        return self.kv_pool.numel() * self.kv_pool.element_size()

    @property
    def page_nbytes(self) -> int:
        """Bytes of one page's payload (every layer, K and V), as :meth:`read_pages` returns it."""
        pool = self.kv_pool
        return pool[:, :, 0].numel() * pool.element_size()

    def kv_layout(self) -> dict[str, int | str]:
        """The pool geometry a peer must share for pages to mean the same thing."""
        layers, _, _, page_size, heads, head_dim = self.kv_pool.shape
        return {
            "layers": int(layers),
            "kv_heads": int(heads),
            "head_dim": int(head_dim),
            "page_size": int(page_size),
            "dtype": str(self.kv_pool.dtype).removeprefix("torch."),
        }

    # ---- I2 ----------------------------------------------------------------------------------

    def scrub_released(self) -> None:
        """Zero-fill every page on the ledger's scrub list now (I2); the pool holds no stale page after.

        Runs first in :meth:`execute`, :meth:`read_pages` and :meth:`write_page`, so that no forward
        pass and no handoff ever touches the pool while a released page still holds its old KV.
        Loops call it too, after releasing pages, so stale KV does not sit in an idle pool.
        """
        scrub_released(self.ledger, self.scrub)

    def scrub(self, pages: list[int]) -> None:
        """Zero-fill ``pages`` in every layer, K and V (invariant I2). Runs before the next forward."""
        if not pages:
            return
        start = time.perf_counter()
        by_page = self.kv_pool.view(self.kv_pool.shape[0] * 2, self.num_pages + 1, -1)  # [layers*2, pages, page]
        if self.device.type == "cpu":
            # One strided memset per run of consecutive pages: twice index_fill_'s speed on CPU.
            for first, last in page_runs(pages):
                by_page[:, first : last + 1].zero_()
        else:
            by_page.index_fill_(1, torch.tensor(pages, dtype=torch.long, device=self.device), 0)  # one launch
        self.scrubbed_pages += len(pages)
        self.scrub_seconds += time.perf_counter() - start

    def pages_are_zero(self, pages: list[int]) -> bool:
        """Whether ``pages`` are all zero in the pool right now (a check: it scrubs nothing)."""
        if not pages:
            return True
        index = torch.tensor(pages, dtype=torch.long, device=self.device)
        return not bool(self.kv_pool.index_select(2, index).any())

    # ---- page bytes, for the disaggregated handoff (I4) --------------------------------------

    def read_pages(self, page_ids: list[int]) -> list[memoryview]:
        """The current bytes of ``page_ids``: one batched copy off the device, one read-only view per page.

        A payload is the K and V of the page's slots for every layer, in the pool's own layout
        ``[layers, K|V, page_size, kv_heads, head_dim]`` and dtype.
        """
        self.scrub_released()  # I2
        if not page_ids:
            return []
        index = torch.tensor(page_ids, dtype=torch.long, device=self.device)
        pages = self.kv_pool.index_select(2, index).movedim(2, 0).contiguous().cpu()  # [n, L, 2, ps, H, D]
        flat = memoryview(pages.view(torch.uint8).reshape(-1).numpy()).toreadonly()  # type: ignore[arg-type]
        size = len(flat) // len(page_ids)
        return [flat[i * size : (i + 1) * size] for i in range(len(page_ids))]

    def write_page(self, page_id: int, payload: bytes) -> None:
        """Overwrite one page (all layers, K and V) with ``payload``; its size must be exact."""
        expected = self.page_nbytes
        if len(payload) != expected:
            raise ValueError(f"page payload has {len(payload)} bytes, the pool's pages have {expected}")
        self.scrub_released()  # I2: a page owed its zero-fill is zeroed before, never after, the payload lands
        target = self.kv_pool[:, :, page_id]
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8).view(target.dtype).view(target.shape)
        target.copy_(data.to(self.device))

    # ---- forward -----------------------------------------------------------------------------

    @torch.inference_mode()
    def execute(
        self, items: list[ScheduledSeq], prompt_scores: dict[str, PromptScores] | None = None
    ) -> tuple[list[ScheduledSeq], torch.Tensor]:
        """Run one mixed batch; return the items that sample and their float32 logits [N, vocab].

        With ``prompt_scores`` given, the prompt positions of requests that ask for prompt
        log-probabilities are scored too (see :mod:`kvfence.engine.sampling.prompt_logprobs`), keyed by request id.
        The pages on the ledger's scrub list are zero-filled first (I2).
        """
        self.scrub_released()
        decodes = [it for it in items if it.num_new_tokens == 1]
        prefills = [it for it in items if it.num_new_tokens != 1]
        ordered = decodes + prefills
        input_ids: list[int] = []
        positions: list[int] = []
        slot_mapping: list[int] = []
        sample_index: list[int] = []
        sampled: list[ScheduledSeq] = []
        to_score: list[tuple[ScheduledSeq, int, range]] = []  # item, its first scored row, positions
        ps = self.page_size
        rope_lens: list[int] | None = [] if self.model.model.rotary.length_threshold is not None else None
        for it in ordered:
            table = it.seq.block_table
            end = it.start + it.num_new_tokens
            input_ids.extend(it.seq.token_ids[it.start : end])
            positions.extend(range(it.start, end))
            if rope_lens is not None:  # dynamic NTK / longrope: rotated for the sequence's length
                rope_lens.extend(rope_lengths(it.seq.rope_length, it.start, end))
            slot_mapping.extend(table[p // ps] * ps + p % ps for p in range(it.start, end))
            if prompt_scores is not None and (span := positions_to_score(it.seq, it.start, it.num_new_tokens)):
                to_score.append((it, len(input_ids) - end + span.start, span))
            if it.samples:
                sample_index.append(len(input_ids) - 1)
                sampled.append(it)
        dev = self.device
        slots = torch.tensor(slot_mapping, dtype=torch.long, device=dev)
        window = self.cfg.sliding_window
        meta = self._metadata(slots, decodes, prefills, window)
        if self.cfg.full_attention_layers and any(window_binds(it.start + it.num_new_tokens, window) for it in ordered):
            # a mixed model (Qwen2 layer_types) past its window: its full-attention layers see everything
            full = self._metadata(slots, decodes, prefills, None)
            meta.layer_overrides = dict.fromkeys(self.cfg.full_attention_layers, full)
        hidden = self.model(
            torch.tensor(input_ids, dtype=torch.long, device=dev),
            torch.tensor(positions, dtype=torch.long, device=dev),
            self.kv_caches,
            meta,
            None if rope_lens is None else torch.tensor(rope_lens, dtype=torch.long, device=dev),
        )
        if prompt_scores is not None:
            for it, row, span in to_score:
                prompt_scores[it.seq.request_id] = score_positions(
                    self.model.compute_logits, hidden[row : row + len(span)], it.seq, span
                )
        if not sampled:
            return sampled, torch.empty(0, self.cfg.vocab_size, device=dev)
        if len(sample_index) != hidden.shape[0]:
            hidden = hidden[torch.tensor(sample_index, dtype=torch.long, device=dev)]
        return sampled, self.model.compute_logits(hidden)

    def _metadata(
        self, slots: torch.Tensor, decodes: list[ScheduledSeq], prefills: list[ScheduledSeq], window: int | None
    ) -> AttentionMetadata:
        """The step's attention metadata for layers with this ``window`` (``None``: full attention)."""
        meta = AttentionMetadata(slot_mapping=slots, num_decode_tokens=len(decodes))
        if decodes:
            meta.decode_slots, meta.decode_mask = self._decode_slots(decodes, window)
        offset = len(decodes)
        for it in prefills:
            meta.prefills.append(self._prefill_chunk(it, offset, window))
            offset += it.num_new_tokens
        return meta

    def _decode_slots(
        self, decodes: list[ScheduledSeq], window: int | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        ps, dev = self.page_size, self.device
        lengths = [it.start + 1 for it in decodes]
        max_len = max(lengths)
        num_pages = -(-max_len // ps)
        tables = [it.seq.block_table[:num_pages] for it in decodes]
        padded = [t + [self.null_page] * (num_pages - len(t)) for t in tables]
        pos = torch.arange(max_len, device=dev)
        slots = torch.tensor(padded, dtype=torch.long, device=dev)[:, pos // ps] * ps + pos % ps  # [B, L]
        visible = decode_visibility(torch.tensor(lengths, dtype=torch.long, device=dev), max_len, window)
        if min(lengths) == max_len and bool(visible.all()):
            return slots, None
        slots = torch.where(visible, slots, self.null_slot)
        return slots, visible[:, None, None, :]

    def _prefill_chunk(self, it: ScheduledSeq, token_start: int, window: int | None) -> PrefillChunk:
        ps, dev = self.page_size, self.device
        n, start = it.num_new_tokens, it.start
        context = start + n
        context_slots = None
        if start > 0:
            table = torch.tensor(it.seq.block_table[: -(-context // ps)], dtype=torch.long, device=dev)
            pos = torch.arange(context, device=dev)
            context_slots = table[pos // ps] * ps + pos % ps
        return PrefillChunk(token_start, token_start + n, context_slots, prefill_mask(start, context, window, dev))
