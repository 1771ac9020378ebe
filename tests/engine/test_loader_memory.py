"""Loading holds no more than the weights: safetensors are read into the parameters, never mapped.

A memory-mapped checkpoint's pages count in the process's resident memory while it is open, so
loading a float32 file into 2-byte weights had peaked at the weights plus the whole file. The
reader (``runner.loader.SafetensorsReader``) reads each tensor into its parameter, converting
through a bounce buffer of at most ``BOUNCE_BYTES``; its header checks refuse a malformed file
with a :class:`ModelLoadError` that names it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from kvfence.engine.runner import loader
from kvfence.engine.runner.loader import SafetensorsReader
from kvfence.errors import ModelLoadError
from tests.engine.tiny_models import build_tiny_model

# The peak is VmHWM, reset just before loading (getrusage's ru_maxrss would start at the pytest
# parent's size: Linux carries the forked copy's peak across exec).
_PEAK_CHILD = """
import sys
from pathlib import Path
import torch
from kvfence.engine.config import ModelConfig
from kvfence.engine.runner.loader import load_model

def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))

model_dir, dtype = Path(sys.argv[1]), getattr(torch, sys.argv[2])
cfg = ModelConfig.from_dir(model_dir)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := VmRSS
before = kib("VmRSS")
model = load_model(model_dir, cfg, max_len=64, dtype=dtype, device=torch.device("cpu"))
held = sum(p.numel() * p.element_size() for p in model.parameters())
print((kib("VmHWM") - before) * 1024, held)
"""


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # about 105 MB of float32, most of it in two [32768, 384] matrices (embedding and head)
    return build_tiny_model(tmp_path_factory.mktemp("big"), "llama", vocab_size=32768, hidden_size=384,
                            intermediate_size=768, num_attention_heads=6, num_key_value_heads=2)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_loading_peaks_at_the_weights_not_the_weights_plus_the_file(big_checkpoint: Path, dtype: str) -> None:
    file_bytes = (big_checkpoint / "model.safetensors").stat().st_size
    done = subprocess.run([sys.executable, "-c", _PEAK_CHILD, str(big_checkpoint), dtype],
                          capture_output=True, text=True, check=True)
    grown, held = (int(v) for v in done.stdout.split())
    assert held < file_bytes * (0.6 if dtype == "bfloat16" else 1.01)
    # the weights, the bounce buffer and slack (allocator arenas, library pages first touched while
    # loading: 40 MB on a busy CI box); a mapped file would add all of file_bytes on top
    assert grown < held + loader.BOUNCE_BYTES + file_bytes // 2, (grown / 2**20, held / 2**20, file_bytes / 2**20)


@pytest.mark.parametrize("dest_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("src_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_reader_gives_the_tensors_safetensors_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, src_dtype: torch.dtype, dest_dtype: torch.dtype
) -> None:
    monkeypatch.setattr(loader, "BOUNCE_BYTES", 1000)  # many chunks, one cut mid-row
    gen = torch.Generator().manual_seed(0)
    tensors = {"a": torch.randn(37, 29, generator=gen).to(src_dtype), "b": torch.randn(5, generator=gen).to(src_dtype),
               "empty": torch.empty(0, 4, dtype=src_dtype), "ids": torch.arange(7, dtype=torch.int64)}
    save_file(tensors, str(tmp_path / "m.safetensors"), metadata={"format": "pt"})
    with SafetensorsReader(tmp_path / "m.safetensors") as reader:
        assert sorted(reader.keys()) == sorted(tensors)
        for name, want in tensors.items():
            assert reader.shape(name) == tuple(want.shape)
            dest = torch.full(want.shape, -1, dtype=dest_dtype if want.is_floating_point() else want.dtype)
            reader.read_into(name, dest)
            assert torch.equal(dest, want.to(dest.dtype)), name
        rows = torch.zeros(40, 29, dtype=dest_dtype)  # a narrowed block of rows, as a fused shard is
        reader.read_into("a", rows.narrow(0, 2, 37))
        assert torch.equal(rows[2:39], tensors["a"].to(dest_dtype)) and not rows[:2].any() and not rows[39:].any()


def _raw_file(path: Path, header: object, data: bytes) -> Path:
    body = json.dumps(header).encode()
    path.write_bytes(len(body).to_bytes(8, "little") + body + data)
    return path


@pytest.mark.parametrize(
    ("header", "data", "message"),
    [
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "claims bytes 0..16 of 8"),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, b"\0" * 16, "claims bytes 0..12"),
        ({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, b"\0" * 16, "negative dimension"),
        ({"w": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 2]}}, b"\0" * 2, "unsupported or malformed"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, "overlap"),
        (["not", "an", "object"], b"", "not a JSON object"),
    ],
)
def test_a_malformed_safetensors_file_is_named(tmp_path: Path, header: object, data: bytes, message: str) -> None:
    path = _raw_file(tmp_path / "bad.safetensors", header, data)
    with pytest.raises(ModelLoadError, match=message) as info:
        SafetensorsReader(path)
    assert str(path) in str(info.value)


def test_a_truncated_or_foreign_file_is_named(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x05\0")
    with pytest.raises(ModelLoadError, match="not a safetensors file"):
        SafetensorsReader(short)
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes((1 << 40).to_bytes(8, "little") + b"{}")
    with pytest.raises(ModelLoadError, match="header length"):
        SafetensorsReader(huge)
    text = tmp_path / "text.safetensors"
    text.write_bytes((4).to_bytes(8, "little") + b"\xff\xfe{}")
    with pytest.raises(ModelLoadError, match="not JSON"):
        SafetensorsReader(text)
