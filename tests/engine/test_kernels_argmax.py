"""``argmax_rows`` (the greedy pick) equals ``torch.argmax`` row by row: ties, NaN, -inf, odd widths."""

from __future__ import annotations

import pytest
import torch

from kvfence.engine.kernels import argmax_rows
from tests.engine.kernel_marks import needs_kernels


def _torch_pick(logits: torch.Tensor) -> list[int]:
    return list(logits.argmax(dim=-1).tolist())


@needs_kernels
@pytest.mark.parametrize("rows", [1, 2, 5, 24, 97])
@pytest.mark.parametrize("cols", [1, 7, 8, 9, 33, 1000, 49152])
def test_random_rows_equal_torch(rows: int, cols: int) -> None:
    logits = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows * 7 + cols))
    assert argmax_rows(logits) == _torch_pick(logits)


@needs_kernels
@pytest.mark.parametrize("cols", [3, 8, 13, 64, 1001])
def test_the_maximum_anywhere_ties_nan_and_infinities(cols: int) -> None:
    cases = []
    for position in range(cols):  # the largest value at every position, the vector tail included
        row = torch.full((cols,), -1.0)
        row[position] = 2.0
        cases.append(row)
    tie = torch.zeros(cols)
    tie[cols // 2] = tie[cols - 1] = 5.0  # equal maxima: the first wins
    cases.append(tie)
    for first, second in ((0, cols - 1), (cols - 1, cols - 1), (cols // 3, cols // 2)):
        row = torch.randn(cols, generator=torch.Generator().manual_seed(first))
        row[second] = float("nan")
        row[first] = float("nan")  # NaN ranks above every number: the first NaN wins
        cases.append(row)
    cases.append(torch.full((cols,), float("-inf")))
    ninf = torch.full((cols,), float("-inf"))
    ninf[cols - 1] = -1e30
    cases.append(ninf)
    pinf = torch.randn(cols, generator=torch.Generator().manual_seed(1))
    pinf[cols - 1] = float("inf")
    cases.append(pinf)
    logits = torch.stack(cases)
    assert argmax_rows(logits) == _torch_pick(logits)


@needs_kernels
def test_strided_rows_and_views() -> None:
    base = torch.randn(6, 130, generator=torch.Generator().manual_seed(3))
    view = base[1:5, :100]  # row stride 130, unit column stride
    assert argmax_rows(view) == _torch_pick(view)
    one = base[2:3]
    assert argmax_rows(one) == _torch_pick(one)


@pytest.mark.parametrize(
    "logits",
    [
        torch.randn(3, 50, dtype=torch.float64),
        torch.randn(3, 50).to(torch.bfloat16),
        torch.randn(50, 3).t(),  # column stride 3: not the kernel's layout
        torch.randn(4, 0),  # no columns: torch's own error
    ],
    ids=["float64", "bfloat16", "transposed", "empty"],
)
def test_other_inputs_are_torchs(logits: torch.Tensor) -> None:
    if logits.shape[1] == 0:
        with pytest.raises((IndexError, RuntimeError)):
            argmax_rows(logits)
        return
    assert argmax_rows(logits) == _torch_pick(logits)


def test_without_kernels_it_is_torch(fresh_kernels: pytest.MonkeyPatch) -> None:
    fresh_kernels.setenv("KVFENCE_CPU_KERNELS", "0")
    logits = torch.randn(5, 77, generator=torch.Generator().manual_seed(9))
    logits[1, 3] = float("nan")
    assert argmax_rows(logits) == _torch_pick(logits)
