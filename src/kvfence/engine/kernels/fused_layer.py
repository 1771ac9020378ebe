"""One decoder layer's two halves around attention as one kernel call each (CPU fp32 decode).

``pre``: RMSNorm, the fused q/k/v product (+ bias), the per-head q/k RMSNorms where the family
has them (Qwen3), RoPE on the query and key heads.
``post``: o_proj, residual add, RMSNorm, gate/up product, ``silu(gate) * up``, down product,
residual add. A decode step of a 30-layer model thus makes about 60 kernel calls where the
per-op path made some 900 torch ops and 200 kernel calls, each a few microseconds of Python and
dispatch while the memory bus, which bounds a decode step, waits. The halves run the same
kernels in the same order as :func:`.linear`, :func:`.rms_norm`, :func:`.silu_mul` and
:func:`.try_rope_`, so their results are bit for bit those of the per-op path.

A layer's weights are described once (pointers and sizes in a ``ctypes.Structure``), so a call
marshals nine plain integers. Callers ask :meth:`DecoderLayerKernel.takes` first and run their
torch path when it says no (CUDA, half precision, autograd, batches above
:data:`.MAX_KERNEL_ROWS`, a product form that calibration gave to torch, kernels off).
"""

from __future__ import annotations

import ctypes

import torch

from kvfence.engine.kernels.library import HALF_WEIGHT_KINDS, cpu_kernels
from kvfence.engine.kernels.loading import KvDecoderLayer, KvLinear
from kvfence.engine.kernels.ops import (
    MAX_KERNEL_ROWS,
    MIN_PARALLEL_WEIGHTS,
    TILED_MIN_ROWS,
    kernel_runs_products,
)
from kvfence.engine.kernels.packed_weights import PackedWeight, packed_weights_enabled

__all__ = ["DecoderLayerKernel"]


def _usable(t: torch.Tensor | None, shape: tuple[int, ...], *, half_ok: bool = False) -> bool:
    return t is None or (
        (t.dtype == torch.float32 or (half_ok and t.dtype in HALF_WEIGHT_KINDS)) and t.is_cpu and t.is_contiguous() and tuple(t.shape) == shape and not t.requires_grad
    )


class DecoderLayerKernel:
    """A Llama-family decoder layer's weights as the fused kernels' argument block.

    Build it with :meth:`build` (``None`` when the kernels or the weights do not fit). It holds the
    weight tensors and their raw pointers; :meth:`is_current` says whether they still hold (same
    library, same storage), and the owner rebuilds it when not, or when it swaps a tensor for another.
    """

    def __init__(
        self,
        lib: ctypes.CDLL,
        layer: KvDecoderLayer,
        tensors: tuple[torch.Tensor | None, ...],
        packed: tuple[PackedWeight, ...] = (),
    ) -> None:
        self._lib = lib
        self._layer = layer  # kept alive: the C side reads it through its address
        self._address = ctypes.addressof(layer)
        self._tensors = tensors
        self._packed = packed  # kept alive likewise; each must still match its weight
        self._pointers = tuple(None if t is None else t.data_ptr() for t in tensors)
        self.num_heads, self.num_kv_heads, self.head_dim = layer.num_heads, layer.num_kv_heads, layer.head_dim
        self.hidden = layer.hidden
        # half-precision weights always run the kernel's products (torch has no faster form of
        # them here), whatever a float32 model's calibration chose for float32 products
        self._half = all(lin.kind != 0 for lin in (layer.qkv, layer.o, layer.gate_up, layer.down))

    @classmethod
    def build(
        cls,
        *,
        input_norm: torch.Tensor,
        post_norm: torch.Tensor,
        eps: float,
        qkv: tuple[torch.Tensor, torch.Tensor | None],
        o: tuple[torch.Tensor, torch.Tensor | None],
        gate_up: tuple[torch.Tensor, torch.Tensor | None],
        down: tuple[torch.Tensor, torch.Tensor | None],
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        head_norms: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> DecoderLayerKernel | None:
        """The argument block for these weights (``(weight, bias)`` pairs), or ``None`` when the
        kernels are off here or a tensor is not a contiguous CPU one of the expected shape, float32
        (the four weights may be bfloat16 or float16: :mod:`.half_weights`). ``head_norms``: the
        ``(q_norm, k_norm)`` weights [head_dim] of a per-head RMSNorm before RoPE (Qwen3), same ``eps``."""
        lib = cpu_kernels()
        if lib is None or head_dim % 2 or min(num_heads, num_kv_heads, head_dim) <= 0:
            return None
        hidden = input_norm.shape[0] if input_norm.dim() == 1 else 0
        inter = down[0].shape[1] if down[0].dim() == 2 else 0
        q_width = num_heads * head_dim
        expected = (
            (qkv, ((num_heads + 2 * num_kv_heads) * head_dim, hidden)),
            (o, (hidden, q_width)),
            (gate_up, (2 * inter, hidden)),
            (down, (hidden, inter)),
        )
        if hidden <= 0 or inter <= 0 or not _usable(post_norm, (hidden,)) or not _usable(input_norm, (hidden,)):
            return None
        if head_norms is not None and not all(_usable(t, (head_dim,)) for t in head_norms):
            return None
        linears = []
        for (weight, bias), shape in expected:
            if not _usable(weight, shape, half_ok=True) or not _usable(bias, (shape[0],)):
                return None
        packed = [
            PackedWeight(weight) if packed_weights_enabled() and weight.dtype == torch.float32 else None
            for (weight, _), _ in expected
        ]
        for ((weight, bias), shape), panels in zip(expected, packed, strict=True):
            linears.append(
                KvLinear(
                    weight.data_ptr(),
                    None if bias is None else bias.data_ptr(),
                    None if panels is None else panels.panels.data_ptr(),
                    shape[0],
                    shape[1],
                    HALF_WEIGHT_KINDS.get(weight.dtype, 0),
                )
            )
        layer = KvDecoderLayer(
            *linears, input_norm.data_ptr(), post_norm.data_ptr(), eps, hidden, num_heads, num_kv_heads, head_dim,
            MIN_PARALLEL_WEIGHTS, TILED_MIN_ROWS,
            *((None, None) if head_norms is None else (t.data_ptr() for t in head_norms)),
        )
        tensors = (input_norm, post_norm, *(t for pair in (qkv, o, gate_up, down) for t in pair), *(head_norms or ()))
        return cls(lib, layer, tensors, tuple(p for p in packed if p is not None))

    @property
    def address(self) -> int:
        """Where the argument block lives (``KvDecoderLayer*`` on the C side), for :mod:`.decode_step`."""
        return self._address

    def is_current(self) -> bool:
        """Whether the library in use is the one this block was built for, every tensor it
        describes still has its storage (``param.data = ...`` moves it; copies into it do not), and
        every packed weight copy still matches its weight (no in-place write since, by torch's
        version counter)."""
        if cpu_kernels() is not self._lib:
            return False
        for t, ptr in zip(self._tensors, self._pointers, strict=True):
            if t is not None and t.data_ptr() != ptr:
                return False
        return all(p.is_current(p.weight) for p in self._packed)

    def takes(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
        """Whether :meth:`pre` and :meth:`post` run this batch: ``x`` [T, hidden] CPU float32, no
        autograd, ``T`` in the kernel's range with the kernel chosen for its products (half weights:
        always the kernel's), ``cos`` and
        ``sin`` [T, 1, head_dim / 2] tables with unit stride in the last dimension."""
        rows = x.shape[0] if x.dim() == 2 else 0
        return (
            rows > 0
            and x.shape[1] == self.hidden
            and x.dtype == torch.float32
            and x.is_cpu
            and x.stride(1) == 1
            and x.stride(0) >= self.hidden
            and not (torch.is_grad_enabled() and x.requires_grad)
            and (0 < rows <= MAX_KERNEL_ROWS if self._half else kernel_runs_products(rows))
            and cpu_kernels() is self._lib
            and cos.shape == (rows, 1, self.head_dim // 2)
            and sin.shape == cos.shape
            and cos.stride() == sin.stride()
            and cos.stride(2) == 1
            and cos.dtype == torch.float32
            and sin.dtype == torch.float32
            and cos.is_cpu
            and sin.is_cpu
        )

    def pre(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``qkv_proj(rms_norm(x))`` with its q and k heads normed (where given) and rotated: [T, H + 2 KV, D].
        Only for a batch that :meth:`takes` accepted."""
        rows = x.shape[0]
        qkv = torch.empty(rows, self.num_heads + 2 * self.num_kv_heads, self.head_dim, dtype=torch.float32)
        self._lib.kvfence_layer_pre_f32(
            self._address, x.data_ptr(), rows, x.stride(0), cos.data_ptr(), sin.data_ptr(), cos.stride(0),
            qkv.data_ptr(), torch.get_num_threads(),
        )
        return qkv

    def post(self, attn: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``h + mlp(rms_norm(h))`` with ``h = x + o_proj(attn)``; ``attn`` [T, H * D]: [T, hidden].
        Only for a batch that :meth:`takes` accepted."""
        rows = x.shape[0]
        if attn.shape != (rows, self.num_heads * self.head_dim):
            raise ValueError(f"attention output of shape {tuple(attn.shape)}, expected {(rows, self.num_heads * self.head_dim)}")
        if attn.dtype != torch.float32 or not attn.is_cpu or attn.stride(-1) != 1 or attn.stride(0) < attn.shape[1]:
            attn = attn.float().contiguous()
        out = torch.empty(rows, self.hidden, dtype=torch.float32)
        self._lib.kvfence_layer_post_f32(
            self._address, attn.data_ptr(), rows, attn.stride(0), x.data_ptr(), x.stride(0), out.data_ptr(),
            torch.get_num_threads(),
        )
        return out
