"""Paged attention equals a plain per-token reference, through the CPU kernel and through torch.

The reference attends each query token to its own sequence's K/V, gathered by position from a
dict, in float64, with causal and sliding-window visibility written out token by token. The pool
holds NaN everywhere no scheduled sequence wrote, except the always-zero null page, so any read of
another sequence's page (or of an unwritten slot) shows up as NaN in the output (I1).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch

import kvfence.engine.layers.attention as attention
from kvfence.engine.kernels.paged_attention import decode_kernel_reason, paged_decode_f32, reset_decode_kernel
from kvfence.engine.layers.attention import AttentionMetadata, PrefillChunk, paged_attention

PAGE = 4

needs_decode_kernel = pytest.mark.skipif(
    decode_kernel_reason() != "in use", reason=f"paged decode kernel not in use here: {decode_kernel_reason()}"
)


@pytest.fixture(params=["kernel", "torch"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run each test through the kernel (where it applies) and through torch's gather + SDPA."""
    if request.param == "torch":
        monkeypatch.setattr(attention, "paged_decode_f32", lambda *args, **kwargs: None)
    elif decode_kernel_reason() != "in use":
        pytest.skip(f"paged decode kernel not in use here: {decode_kernel_reason()}")
    yield request.param


@dataclass
class Seq:
    """A sequence with ``cached`` positions already in the pool and ``new`` positions this step."""

    cached: int
    new: int
    pages: list[int]


def _layout(specs: list[tuple[int, int]], num_pages: int, gen: torch.Generator) -> list[Seq]:
    """Scatter each sequence's pages over the pool in a random order (pages are never contiguous)."""
    order = torch.randperm(num_pages, generator=gen).tolist()
    seqs = []
    for cached, new in specs:
        n = -(-(cached + new) // PAGE)
        seqs.append(Seq(cached, new, order[:n]))
        order = order[n:]
    return seqs


def _slot(seq: Seq, pos: int) -> int:
    return seq.pages[pos // PAGE] * PAGE + pos % PAGE


def _metadata(seqs: list[Seq], window: int | None, null_page: int, device: str = "cpu") -> AttentionMetadata:
    """Built the way the model runner builds it: decodes (new == 1) first, then prefill chunks."""
    decodes = [s for s in seqs if s.new == 1]
    prefills = [s for s in seqs if s.new != 1]
    slot_mapping = [_slot(s, p) for s in decodes + prefills for p in range(s.cached, s.cached + s.new)]
    meta = AttentionMetadata(slot_mapping=torch.tensor(slot_mapping, device=device), num_decode_tokens=len(decodes))
    null_slot = null_page * PAGE
    if decodes:
        width = max(s.cached + 1 for s in decodes)
        rows, mask = [], []
        for s in decodes:
            end = s.cached + 1
            begin = max(0, end - window) if window is not None else 0
            rows.append([_slot(s, p) if begin <= p < end else null_slot for p in range(width)])
            mask.append([begin <= p < end for p in range(width)])
        meta.decode_slots = torch.tensor(rows, device=device)
        meta.decode_mask = torch.tensor(mask, device=device)[:, None, None, :]
    offset = len(decodes)
    for s in prefills:
        start, end = s.cached, s.cached + s.new
        context = None
        if start > 0:
            context = torch.tensor([_slot(s, p) for p in range(end)], device=device)
        q_pos = torch.arange(start, end)[:, None]
        k_pos = torch.arange(end)[None, :]
        allowed = k_pos <= q_pos
        if window is not None:
            allowed &= k_pos > q_pos - window
        mask = None if start == 0 and (window is None or end <= window) else allowed[None, None].to(device)
        meta.prefills.append(PrefillChunk(offset, offset + s.new, context, mask))
        offset += s.new
    return meta


def _run(specs: list[tuple[int, int]], heads: int, kv_heads: int, head_dim: int, window: int | None,
         seed: int, dtype: torch.dtype = torch.float32, device: str = "cpu", kv_dtype: torch.dtype | None = None) -> None:
    """``kv_dtype``: the pool's dtype when it differs from ``dtype`` (K/V are stored rounded to it
    and every attention reads the rounded values: the reference uses them too)."""
    kv_dtype = kv_dtype or dtype
    gen = torch.Generator().manual_seed(seed)
    num_pages = sum(-(-(c + n) // PAGE) for c, n in specs) + 3  # a few pages nobody owns
    seqs = _layout(specs, num_pages, gen)
    # Pool: NaN wherever nobody wrote (a read of it poisons the output); the null page is zero.
    k_cache = torch.full(((num_pages + 1) * PAGE, kv_heads, head_dim), math.nan, dtype=kv_dtype)
    v_cache = torch.full_like(k_cache, math.nan)
    k_cache[num_pages * PAGE :] = 0
    v_cache[num_pages * PAGE :] = 0
    keys: dict[tuple[int, int], torch.Tensor] = {}
    values: dict[tuple[int, int], torch.Tensor] = {}
    for i, s in enumerate(seqs):
        for p in range(s.cached + s.new):
            keys[i, p] = torch.randn(kv_heads, head_dim, generator=gen).to(dtype)
            values[i, p] = torch.randn(kv_heads, head_dim, generator=gen).to(dtype)
            if p < s.cached:
                k_cache[_slot(s, p)] = keys[i, p].to(kv_dtype)
                v_cache[_slot(s, p)] = values[i, p].to(kv_dtype)
    order = [i for i, s in enumerate(seqs) if s.new == 1] + [i for i, s in enumerate(seqs) if s.new != 1]
    tokens = [(i, p) for i in order for p in range(seqs[i].cached, seqs[i].cached + seqs[i].new)]
    q = torch.randn(len(tokens), heads, head_dim, generator=gen).to(dtype)
    k = torch.stack([keys[t] for t in tokens])
    v = torch.stack([values[t] for t in tokens])
    meta = _metadata(seqs, window, num_pages, device)
    out = paged_attention(q.to(device), k.to(device), v.to(device), k_cache.to(device), v_cache.to(device), meta).cpu()

    group = heads // kv_heads
    want = torch.empty(len(tokens), heads, head_dim, dtype=torch.float64)
    for row, (i, pos) in enumerate(tokens):
        first = 0 if window is None else max(0, pos + 1 - window)
        ks = torch.stack([keys[i, p] for p in range(first, pos + 1)]).to(kv_dtype).double()  # [n, KV, D]
        vs = torch.stack([values[i, p] for p in range(first, pos + 1)]).to(kv_dtype).double()
        for h in range(heads):
            scores = ks[:, h // group] @ q[row, h].double() / math.sqrt(head_dim)
            want[row, h] = torch.softmax(scores, 0) @ vs[:, h // group]
    assert torch.isfinite(out).all(), "attention read a slot outside the sequences' own pages"
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "head_dim"),
    # head_dim 20: the scalar path; the others the vector path, 72 and 128 in two register blocks
    [(6, 2, 16), (4, 4, 8), (8, 1, 20), (9, 3, 64), (4, 2, 72), (2, 1, 128)],
)
@pytest.mark.parametrize("window", [None, 5])
def test_decode_batch_equals_reference(path: str, heads: int, kv_heads: int, head_dim: int, window: int | None) -> None:
    specs = [(0, 1), (3, 1), (12, 1), (7, 1), (30, 1), (15, 1), (8, 1)]  # 1 to 31 positions: whole and partial groups of 8
    _run(specs, heads, kv_heads, head_dim, window, seed=heads * 100 + head_dim)


@pytest.mark.parametrize("window", [None, 9])
def test_large_decode_batch_equals_reference(path: str, window: int | None) -> None:
    # Enough sequences that the kernel gives each thread whole rows (every KV head) per task.
    gen = torch.Generator().manual_seed(7)
    specs = [(int(torch.randint(0, 60, (1,), generator=gen)), 1) for _ in range(40)]
    _run(specs, 6, 3, 32, window, seed=11)


@pytest.mark.parametrize("window", [None, 6])
def test_mixed_batch_with_prefill_on_cached_pages_equals_reference(path: str, window: int | None) -> None:
    # Decodes, a prefill from position 0, a prefill chunk on top of 10 cached positions (a prefix
    # hit or an earlier chunk), and a one-position prefix with a long chunk after it.
    specs = [(5, 1), (0, 9), (10, 7), (17, 1), (1, 12), (0, 2)]
    _run(specs, 6, 2, 16, window, seed=3)


def test_bfloat16_pool_uses_torch_and_equals_reference(path: str) -> None:
    _run([(4, 1), (9, 1), (0, 6), (6, 5)], 4, 2, 16, None, seed=5, dtype=torch.bfloat16)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(9, 3, 64), (4, 2, 72), (6, 2, 16)])
def test_float32_queries_over_a_half_precision_pool_equal_reference(
    path: str, heads: int, kv_heads: int, head_dim: int, kv_dtype: torch.dtype
) -> None:
    # kv_cache_dtype: float32 model, 2-byte pool. Decodes (kernel or torch), a prefill from 0 and a
    # chunk on cached pages; the reference attends in float64 over the same rounded K/V.
    specs = [(5, 1), (0, 9), (10, 7), (17, 1), (30, 1), (1, 12), (40, 1)]
    _run(specs, heads, kv_heads, head_dim, None, seed=head_dim, kv_dtype=kv_dtype)
    _run(specs, heads, kv_heads, head_dim, 6, seed=head_dim + 1, kv_dtype=kv_dtype)


@needs_decode_kernel
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_kernel_is_called_for_cpu_float32_decode(monkeypatch: pytest.MonkeyPatch, kv_dtype: torch.dtype) -> None:
    calls = []

    def spy(*args: object, **kwargs: object) -> torch.Tensor | None:
        out = paged_decode_f32(*args, **kwargs)  # type: ignore[arg-type]
        calls.append(out is not None)
        return out

    monkeypatch.setattr(attention, "paged_decode_f32", spy)
    _run([(3, 1), (8, 1)], 4, 2, 8, None, seed=1, kv_dtype=kv_dtype)
    assert calls == [True]


def test_kernel_declines_what_it_does_not_handle() -> None:
    q = torch.randn(2, 4, 8)
    cache = torch.randn(16, 2, 8)
    slots = torch.zeros(2, 3, dtype=torch.long)
    bounds = torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.long)
    assert paged_decode_f32(q.double(), cache.double(), cache.double(), slots, *bounds, 1.0) is None
    assert paged_decode_f32(q, cache.transpose(0, 1).contiguous().transpose(0, 1), cache, slots, *bounds, 1.0) is None
    assert paged_decode_f32(q, cache, cache, slots.int(), *bounds, 1.0) is None
    assert paged_decode_f32(torch.randn(2, 5, 8), cache, cache, slots, *bounds, 1.0) is None  # 5 heads over 2
    assert paged_decode_f32(q, cache.bfloat16(), cache, slots, *bounds, 1.0) is None  # K and V differ
    odd = torch.randn(16, 2, 12).bfloat16()  # a 2-byte pool needs head_dim % 8 == 0
    assert paged_decode_f32(torch.randn(2, 4, 12), odd, odd, slots, *bounds, 1.0) is None


def test_kernel_switched_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvfence.engine.kernels import reset_kernels

    monkeypatch.setenv("KVFENCE_CPU_KERNELS", "0")
    reset_kernels()
    reset_decode_kernel()
    try:
        assert decode_kernel_reason().startswith("disabled")
        q = torch.randn(1, 2, 8)
        cache = torch.randn(4, 1, 8)
        one = torch.ones(1, dtype=torch.long)
        assert paged_decode_f32(q, cache, cache, torch.zeros(1, 1, dtype=torch.long), one * 0, one, 1.0) is None
    finally:
        monkeypatch.undo()
        reset_kernels()
        reset_decode_kernel()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_mixed_batch_equals_reference() -> None:
    _run([(5, 1), (0, 9), (10, 7), (17, 1)], 6, 2, 16, 6, seed=3, device="cuda")
