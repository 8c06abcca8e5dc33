"""Lazy float32 loading from ``.safetensors`` files (memory-mapped, bf16 included).

The format is an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the bytes. Reading it directly keeps
the exporter free of torch and handles bf16, which NumPy has no type for.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

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
    """The tensor table of a safetensors file and where its data starts."""
    with open_regular(path) as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path.name} is not a safetensors file (too short)")
        (size,) = struct.unpack("<Q", raw)
        if size > _MAX_HEADER:
            raise CheckpointError(f"{path.name} is not a safetensors file (header size {size})")
        try:
            header = json.loads(f.read(size))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"{path.name} has a malformed safetensors header: {exc}") from None
    header.pop("__metadata__", None)
    return header, 8 + size


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
