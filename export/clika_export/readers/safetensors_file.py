"""Lazy float32 loading from ``.safetensors`` files (memory-mapped, bf16 included).

The format is an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the bytes. Reading it directly keeps
the exporter free of torch and handles bf16, which NumPy has no type for.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from clika_export.checkpoint import CheckpointError
from clika_export.readers.regular_file import open_regular

_NUMPY_TYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
# A header larger than this is not a safetensors file (the format caps it at 100 MB).
_MAX_HEADER = 100 * 1024 * 1024


def read_header(path: Path) -> tuple[dict[str, dict], int]:
    """The tensor table of a safetensors file and where its data starts, every entry checked."""
    with open_regular(path) as f:
        file_size = os.fstat(f.fileno()).st_size
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path.name} is not a safetensors file (too short)")
        (size,) = struct.unpack("<Q", raw)
        if size > min(_MAX_HEADER, file_size - 8):
            raise CheckpointError(
                f"{path.name} is not a safetensors file (header size {size} in a file of {file_size} bytes)"
            )
        try:
            header = json.loads(f.read(size))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"{path.name} has a malformed safetensors header: {exc}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path.name} has a malformed safetensors header (not a JSON object)")
    header.pop("__metadata__", None)
    data_size = file_size - 8 - size
    for name, item in header.items():
        _check_entry(path, name, item, data_size)
    return header, 8 + size


def _check_entry(path: Path, name: str, item: Any, data_size: int) -> None:
    """A header entry must be {dtype: str, shape: [int >= 0, ...], data_offsets: [begin, end]} inside the data."""

    def bad(problem: str) -> CheckpointError:
        return CheckpointError(f"{path.name}: tensor {name} {problem}")

    if not isinstance(item, dict):
        raise bad("has a header entry that is not an object")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in item:
            raise bad(f"has no {key!r} in the header")
    if not isinstance(item["dtype"], str):
        raise bad(f"has a dtype that is not a name: {item['dtype']!r}")
    shape, offsets = item["shape"], item["data_offsets"]
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise bad(f"has a shape that is not a list of sizes >= 0: {shape!r}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
        raise bad(f"has data_offsets that are not [begin, end]: {offsets!r}")
    if offsets[0] > offsets[1] or offsets[1] > data_size:
        raise bad(f"has data_offsets {offsets} past the end of the data ({data_size} bytes)")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def tensor_loaders(path: Path) -> dict[str, Callable[[], np.ndarray]]:
    """One lazy loader per tensor in ``path``, each returning float32 (or the stored integer type)."""
    header, data_start = read_header(path)
    return {name: _loader(path, name, entry, data_start) for name, entry in header.items()}


def _loader(path: Path, name: str, entry: dict, data_start: int) -> Callable[[], np.ndarray]:
    dtype, shape = entry["dtype"], tuple(entry["shape"])
    begin, end = entry["data_offsets"]
    if dtype != "BF16" and dtype not in _NUMPY_TYPES:
        raise CheckpointError(
            f"{path.name}: tensor {name} has dtype {dtype}, which the exporter does not read"
        )
    # bf16 is the upper half of a float32: read it as uint16 and shift.
    stored = np.dtype(np.uint16) if dtype == "BF16" else np.dtype(_NUMPY_TYPES[dtype])
    count = int(np.prod(shape, dtype=np.int64))
    if count * stored.itemsize != end - begin:
        raise CheckpointError(f"{path.name}: tensor {name} has a byte range that does not match its shape")

    def load() -> np.ndarray:
        if count == 0:
            return np.zeros(shape, dtype=np.float32)
        raw = np.memmap(path, dtype=stored, mode="r", offset=data_start + begin, shape=(count,))
        if dtype == "BF16":
            values = (raw.astype(np.uint32) << 16).view(np.float32)
        elif stored.kind == "f":
            values = raw.astype(np.float32)
        else:
            values = np.array(raw)
        return values.reshape(shape)

    return load
