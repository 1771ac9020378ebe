"""``write_kv`` leaves the pool exactly as ``index_copy_`` of ``.to(pool dtype)`` does, or declines."""

from __future__ import annotations

import pytest
import torch

from kvfence.engine.kernels.paged_attention import write_kv
from tests.engine.kernel_marks import needs_kernels

_POOL_DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def _qkv(tokens: int, heads: int, kv_heads: int, head_dim: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-40, 37, head_dim)  # subnormal to near-overflow magnitudes in each row
    return torch.randn(tokens, heads + 2 * kv_heads, head_dim, generator=gen) * scale


@needs_kernels
@pytest.mark.parametrize("pool_dtype", _POOL_DTYPES)
@pytest.mark.parametrize(("tokens", "heads", "kv_heads", "head_dim"), [(1, 9, 3, 64), (24, 4, 4, 16), (97, 6, 2, 20), (3, 2, 1, 2)])
def test_equals_index_copy_bit_for_bit(pool_dtype: torch.dtype, tokens: int, heads: int, kv_heads: int, head_dim: int) -> None:
    qkv = _qkv(tokens, heads, kv_heads, head_dim, tokens + head_dim)
    k, v = qkv[:, heads : heads + kv_heads], qkv[:, heads + kv_heads :]  # slices of the fused projection
    num_slots = 3 * tokens + 5
    slots = torch.randperm(num_slots, generator=torch.Generator().manual_seed(1))[:tokens]
    k_cache = torch.randn(num_slots, kv_heads, head_dim).to(pool_dtype)  # old contents elsewhere stay
    v_cache = torch.randn(num_slots, kv_heads, head_dim).to(pool_dtype)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    want_k.index_copy_(0, slots, k.to(pool_dtype))
    want_v.index_copy_(0, slots, v.to(pool_dtype))
    assert write_kv(k, v, k_cache, v_cache, slots)
    assert torch.equal(_bits(k_cache), _bits(want_k))
    assert torch.equal(_bits(v_cache), _bits(want_v))


@needs_kernels
@pytest.mark.parametrize("pool_dtype", _POOL_DTYPES)
def test_special_values_round_as_torch(pool_dtype: torch.dtype) -> None:
    values = torch.tensor([
        float("inf"), float("-inf"), 0.0, -0.0, 3.0e38, -3.0e38, 65504.0, 65520.0, 1e-45, 6e-8, 1.00390625,
        1.01171875, -1.00390625, 1.0 + 2**-8 + 2**-20, 0.1, -0.3,
    ])
    k = values.view(1, 2, 8)
    v = -values.view(1, 2, 8)
    k_cache, v_cache = torch.zeros(3, 2, 8, dtype=pool_dtype), torch.zeros(3, 2, 8, dtype=pool_dtype)
    assert write_kv(k, v, k_cache, v_cache, torch.tensor([2]))
    assert torch.equal(_bits(k_cache[2]), _bits(values.view(2, 8).to(pool_dtype)))
    assert torch.equal(_bits(v_cache[2]), _bits((-values).view(2, 8).to(pool_dtype)))
    nan = torch.full((1, 2, 8), float("nan"))
    assert write_kv(nan, nan, k_cache, v_cache, torch.tensor([0]))
    assert bool(k_cache[0].float().isnan().all()) and bool(v_cache[0].float().isnan().all())


@needs_kernels
@pytest.mark.parametrize("bad", [-1, 7])
def test_a_slot_outside_the_pool_raises_and_writes_nothing(bad: int) -> None:
    k, v = torch.randn(3, 1, 8), torch.randn(3, 1, 8)
    k_cache, v_cache = torch.zeros(7, 1, 8), torch.zeros(7, 1, 8)
    with pytest.raises(IndexError):
        write_kv(k, v, k_cache, v_cache, torch.tensor([0, bad, 2]))
    assert not k_cache.any() and not v_cache.any()


@pytest.mark.parametrize(
    "case",
    ["float64 input", "head stride", "int32 slots", "pool views", "slot count", "pool shape"],
)
def test_declines_what_it_does_not_take(case: str) -> None:
    k, v = torch.randn(4, 2, 8), torch.randn(4, 2, 8)
    k_cache, v_cache = torch.zeros(9, 2, 8), torch.zeros(9, 2, 8)
    slots = torch.tensor([0, 3, 5, 8])
    if case == "float64 input":
        k, v = k.double(), v.double()
    elif case == "head stride":
        k, v = torch.randn(4, 2, 16)[:, :, :8], torch.randn(4, 2, 16)[:, :, :8]
    elif case == "int32 slots":
        slots = slots.int()
    elif case == "pool views":
        k_cache, v_cache = torch.zeros(9, 2, 16)[:, :, :8], torch.zeros(9, 2, 16)[:, :, :8]
    elif case == "slot count":
        slots = slots[:3]
    else:
        k_cache, v_cache = torch.zeros(9, 1, 16), torch.zeros(9, 1, 16)
    before = k_cache.clone()
    assert not write_kv(k, v, k_cache, v_cache, slots)
    assert torch.equal(k_cache, before)


def test_without_kernels_it_declines(fresh_kernels: pytest.MonkeyPatch) -> None:
    from kvfence.engine.kernels.paged_attention import reset_decode_kernel

    fresh_kernels.setenv("KVFENCE_CPU_KERNELS", "0")
    reset_decode_kernel()
    try:
        assert not write_kv(torch.randn(1, 1, 8), torch.randn(1, 1, 8), torch.zeros(2, 1, 8), torch.zeros(2, 1, 8),
                            torch.tensor([1]))
    finally:
        fresh_kernels.undo()
        reset_decode_kernel()
