"""Weights and KV pool on transparent huge pages: same values, 2 MiB-aligned buffers, a switch to turn it off."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kvfence.engine.kernels.huge_pages import (
    HUGE_PAGE_BYTES,
    huge_page_empty,
    huge_page_zeros,
    huge_pages_available,
    place_on_huge_pages,
)

needs_thp = pytest.mark.skipif(not huge_pages_available(), reason="no transparent huge pages here")
CPU = torch.device("cpu")


@needs_thp
def test_large_tensor_starts_on_a_huge_page_boundary() -> None:
    t = huge_page_empty((3, 1 << 20), torch.float32, CPU)
    assert t.shape == (3, 1 << 20) and t.dtype == torch.float32 and t.is_contiguous()
    assert t.data_ptr() % HUGE_PAGE_BYTES == 0
    t.fill_(2.5)
    assert bool((t == 2.5).all())


def test_zeros_are_zero_in_every_dtype() -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        z = huge_page_zeros((2, 3, HUGE_PAGE_BYTES // 4), dtype, CPU)
        assert z.dtype == dtype and z.shape == (2, 3, HUGE_PAGE_BYTES // 4)
        assert not bool(z.any())


def test_small_tensor_is_a_plain_one() -> None:
    t = huge_page_empty((4, 5), torch.float32, CPU)
    assert t.shape == (4, 5)
    assert t.untyped_storage().nbytes() == 4 * 5 * 4  # no 2 MiB buffer for 80 bytes


def test_switched_off_gives_plain_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVFENCE_HUGE_PAGES", "0")
    assert not huge_pages_available()
    t = huge_page_empty((1 << 20,), torch.float32, CPU)
    assert t.untyped_storage().nbytes() == 4 << 20
    module = nn.Linear(1024, 1024)
    assert place_on_huge_pages(module) == 0


def _module() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 1536), nn.Linear(1536, 512), nn.Embedding(100, 512))


@needs_thp
def test_parameters_keep_their_values_in_one_buffer() -> None:
    module = _module()
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    x = torch.randn(3, 512)
    want = module[1](module[0](x))  # type: ignore[operator]
    moved = place_on_huge_pages(module)
    assert moved >= sum(p.numel() * 4 for p in before.values())
    bases = set()
    for name, p in module.named_parameters():
        assert torch.equal(p, before[name]), name
        assert p.data_ptr() % 64 == 0  # every tensor starts on a cache line
        bases.add(p.untyped_storage().data_ptr())
    assert len(bases) == 1  # one buffer
    assert min(p.data_ptr() for p in module.parameters()) % HUGE_PAGE_BYTES == 0  # that starts a huge page
    assert torch.equal(module[1](module[0](x)), want)  # type: ignore[operator]


@needs_thp
def test_parameters_of_another_dtype_get_their_own_buffer() -> None:
    module = _module()
    module[2].to(torch.bfloat16)
    place_on_huge_pages(module)
    float_bases = {p.untyped_storage().data_ptr() for p in module.parameters() if p.dtype == torch.float32}
    half_bases = {p.untyped_storage().data_ptr() for p in module.parameters() if p.dtype == torch.bfloat16}
    assert len(float_bases) == 1 and len(half_bases) == 1 and float_bases != half_bases
