"""A local checkpoint's weight files and the safetensors format, torch-free.

:func:`checkpoint_files` finds the weight files of a model directory; :class:`SafetensorsFile`
reads and checks one safetensors header and reads a tensor's bytes with plain file reads (no
memory map: a mapped file's pages count in the resident memory for as long as it stays open).
The torch loader (:mod:`.loader`) and the native one (:mod:`kvfence.engine.native.weights`) read
through it into their own arrays.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from math import prod
from pathlib import Path

from kvfence.errors import ModelLoadError

__all__ = ["ITEM_SIZES", "SafetensorsFile", "TensorEntry", "checkpoint_files"]

_MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit
ITEM_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
"""Bytes per element of each safetensors dtype read here."""


def checkpoint_files(model_dir: Path) -> list[Path]:
    """The weight files of ``model_dir``: safetensors (single, sharded by index, or any ``*.safetensors``),
    else PyTorch ``.bin`` files (read with ``weights_only``: no pickled code runs). :class:`ModelLoadError`
    names what is missing."""
    for index_name, single_name, pattern in (
        ("model.safetensors.index.json", "model.safetensors", "*.safetensors"),
        ("pytorch_model.bin.index.json", "pytorch_model.bin", "*.bin"),
    ):
        index = model_dir / index_name
        if index.is_file():
            return _indexed_files(model_dir, index)
        single = model_dir / single_name
        if single.is_file():
            return [single]
        files = sorted(f for f in model_dir.glob(pattern) if f.name != "training_args.bin")
        if files:
            return files
    raise ModelLoadError(
        f"model directory {str(model_dir)!r} has no model.safetensors (nor sharded *.safetensors with "
        "model.safetensors.index.json, nor pytorch_model.bin): no weights to load"
    )


def _indexed_files(model_dir: Path, index: Path) -> list[Path]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ModelLoadError(f"cannot read {index}: {exc}") from exc
    files = [model_dir / name for name in names]
    for f in files:
        if not f.is_file():
            raise ModelLoadError(f"{index.name} lists {f.name}, which is missing from {str(model_dir)!r}")
    return files


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header: its dtype name (``"F32"``, ``"BF16"`` ...), shape, and byte
    range relative to the data section."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


class SafetensorsFile:
    """One safetensors file, its header checked before any tensor is read: known dtypes, byte ranges
    inside the file that match the shapes, no overlaps. A bad file is a :class:`ModelLoadError` naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file = open(path, "rb")  # noqa: SIM115 - closed by __exit__ / close
        except OSError as exc:
            raise ModelLoadError(f"cannot open {path}: {exc}") from exc
        try:
            self.entries, self._data_start = self._read_header()
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def keys(self) -> Iterable[str]:
        return self.entries.keys()

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name].shape

    def seek_tensor(self, name: str) -> TensorEntry:
        """Position the file at the first byte of tensor ``name``; its entry."""
        entry = self.entries[name]
        self._file.seek(self._data_start + entry.begin)
        return entry

    def read_exact(self, buffer: memoryview, nbytes: int, name: str) -> None:
        """Read the next ``nbytes`` of the file into ``buffer`` (tensor ``name``'s, for the message)."""
        got = 0
        while got < nbytes:
            n = self._file.readinto(buffer[got:nbytes])
            if not n:
                raise ModelLoadError(f"{self.path}: tensor {name} is cut short ({got} of {nbytes} bytes)")
            got += n

    def _read_header(self) -> tuple[dict[str, TensorEntry], int]:
        where = str(self.path)
        prefix = self._file.read(8)
        if len(prefix) != 8:
            raise ModelLoadError(f"{where} is not a safetensors file (shorter than its header length)")
        header_len = int.from_bytes(prefix, "little")
        file_size = os.fstat(self._file.fileno()).st_size
        if header_len > _MAX_HEADER_BYTES or 8 + header_len > file_size:
            raise ModelLoadError(f"{where} is not a safetensors file (header length {header_len})")
        try:
            header = json.loads(self._file.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelLoadError(f"{where}: the safetensors header is not JSON ({exc})") from exc
        if not isinstance(header, dict):
            raise ModelLoadError(f"{where}: the safetensors header is not a JSON object")
        data_start, data_size = 8 + header_len, file_size - 8 - header_len
        entries: dict[str, TensorEntry] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype = str(info["dtype"])
                item = ITEM_SIZES[dtype]
                shape = tuple(int(d) for d in info["shape"])
                begin, end = (int(o) for o in info["data_offsets"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ModelLoadError(
                    f"{where}: tensor {name} has an unsupported or malformed entry {info!r} (dtypes: "
                    f"{', '.join(ITEM_SIZES)})"
                ) from exc
            if any(d < 0 for d in shape):
                raise ModelLoadError(f"{where}: tensor {name} has a negative dimension {shape}")
            nbytes = prod(shape) * item
            if not 0 <= begin <= end <= data_size or end - begin != nbytes:
                raise ModelLoadError(
                    f"{where}: tensor {name} claims bytes {begin}..{end} of {data_size} for {nbytes} bytes of data"
                )
            entries[name] = TensorEntry(dtype, shape, begin, end)
        spans = sorted((e.begin, e.end) for e in entries.values() if e.end > e.begin)
        if any(e0 > b1 for (_, e0), (b1, _) in itertools.pairwise(spans)):
            raise ModelLoadError(f"{where}: tensors overlap in the file")
        return entries, data_start
