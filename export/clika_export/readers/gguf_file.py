"""A bounded GGUF parser: header, metadata and tensor table over a memory map.

``gguf.GGUFReader`` builds a NumPy view per metadata item, which takes 10-20 s
for a 150k-token vocabulary; this parser walks the same layout with ``struct``
in well under a second and checks every length against the file's size, since
the file is untrusted. Tensor bytes stay in the memory map until a loader asks
for them; the ``gguf`` package still provides the type tables and dequantization.

``GGUFMetadata`` gives typed, range-checked access to the metadata: a wrong
type or an implausible value raises ``CheckpointError`` naming the key.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from clika_export.checkpoint import CheckpointError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
_MAX_TENSORS = 1 << 20
_MAX_KEYS = 1 << 16
_MAX_DIMS = 4
_MAX_NAME_BYTES = 1 << 16
_MAX_ARRAY_DEPTH = 3
_DEFAULT_ALIGNMENT = 32

_SCALAR_FORMATS = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
_INTEGER_TYPES = {t for t in _SCALAR_FORMATS if t.name.startswith(("UINT", "INT"))}
_FLOAT_TYPES = {GGUFValueType.FLOAT32, GGUFValueType.FLOAT64}
# Element types the file maps directly (no blocks): tensor bytes viewed as this dtype.
_PLAIN_DTYPES = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}


class _Truncated(Exception):
    """Internal: a read ran past the end of the file."""


@dataclass(frozen=True)
class Value:
    """One metadata value: its GGUF type and content (strings as bytes; arrays as (item type, items))."""

    kind: GGUFValueType
    content: Any


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ggml_type: GGMLQuantizationType
    shape: tuple[int, ...]  # Hugging Face order (outermost first)
    offset: int  # absolute byte offset in the file
    n_bytes: int

    @property
    def type_name(self) -> str:
        return self.ggml_type.name

    @property
    def is_block_quantized(self) -> bool:
        return GGML_QUANT_SIZES[self.ggml_type][0] > 1


class GGUFFile:
    """A parsed GGUF file; tensor data is read lazily through ``data``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = self.path.name
        if not self.path.is_file():
            raise CheckpointError(f"{self.name}: no such GGUF file")
        with open(self.path, "rb") as handle:
            self.size = self.path.stat().st_size
            if self.size < 4 or handle.read(4) != MAGIC:
                raise CheckpointError(f"{self.name}: not a GGUF file (it does not start with {MAGIC!r})")
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse()
        except _Truncated:
            raise CheckpointError(
                f"{self.name}: GGUF file is truncated (its header runs past the end)"
            ) from None

    def data(self, info: TensorInfo) -> np.ndarray:
        """The tensor's bytes as ``gguf.quants.dequantize`` takes them (a view of the memory map)."""
        plain = _PLAIN_DTYPES.get(info.ggml_type)
        if plain is not None:
            return np.frombuffer(
                self._map, dtype=plain, count=info.n_bytes // np.dtype(plain).itemsize, offset=info.offset
            ).reshape(info.shape)
        raw = np.frombuffer(self._map, dtype=np.uint8, count=info.n_bytes, offset=info.offset)
        return raw.reshape(*info.shape[:-1], -1)

    # -- parsing ----------------------------------------------------------------

    def _parse(self) -> None:
        self._pos = 4
        self.version = self._unpack("<I")
        if self.version not in SUPPORTED_VERSIONS:
            swapped = int.from_bytes(self.version.to_bytes(4, "little"), "big")
            hint = " (a big-endian file?)" if swapped in SUPPORTED_VERSIONS else ""
            raise CheckpointError(
                f"{self.name}: GGUF version {self.version} is not supported{hint}; 2 and 3 are"
            )
        tensor_count, key_count = self._unpack("<Q"), self._unpack("<Q")
        if tensor_count > _MAX_TENSORS or key_count > _MAX_KEYS:
            raise CheckpointError(
                f"{self.name}: implausible GGUF header ({tensor_count} tensors, {key_count} metadata keys)"
            )
        self.metadata: dict[str, Value] = {}
        for _ in range(key_count):
            key = self._string(_MAX_NAME_BYTES).decode("utf-8", errors="replace")
            if key in self.metadata:
                raise CheckpointError(f"{self.name}: metadata key {key!r} appears twice")
            self.metadata[key] = self._value(self._value_type(key), key, 0)
        table = [self._tensor_entry() for _ in range(tensor_count)]
        self.data_offset = _align(self._pos, self._alignment())
        self.tensors: dict[str, TensorInfo] = {}
        for name, dims, ggml_type, relative in table:
            info = self._tensor_info(name, dims, ggml_type, relative)
            if name in self.tensors:
                raise CheckpointError(f"{self.name}: tensor {name!r} appears twice")
            self.tensors[name] = info

    def _unpack(self, fmt: str):
        size = struct.calcsize(fmt)
        if self._pos + size > self.size:
            raise _Truncated
        (value,) = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += size
        return value

    def _string(self, limit: int | None = None) -> bytes:
        length = self._unpack("<Q")
        if limit is not None and length > limit:
            raise CheckpointError(
                f"{self.name}: a name of {length} bytes at offset {self._pos - 8} is implausible"
            )
        if self._pos + length > self.size:
            raise _Truncated
        data = self._map[self._pos : self._pos + length]
        self._pos += length
        return data

    def _value_type(self, key: str) -> GGUFValueType:
        raw = self._unpack("<I")
        try:
            return GGUFValueType(raw)
        except ValueError:
            raise CheckpointError(f"{self.name}: metadata {key!r} has unknown value type {raw}") from None

    def _value(self, kind: GGUFValueType, key: str, depth: int) -> Value:
        if kind in _SCALAR_FORMATS:
            return Value(kind, self._unpack(_SCALAR_FORMATS[kind]))
        if kind == GGUFValueType.STRING:
            return Value(kind, self._string())
        if depth >= _MAX_ARRAY_DEPTH:
            raise CheckpointError(f"{self.name}: metadata {key!r} nests arrays too deeply")
        item_kind = self._value_type(key)
        count = self._unpack("<Q")
        if count > self.size - self._pos:  # every item takes at least one byte
            raise _Truncated
        if item_kind in _SCALAR_FORMATS:
            dtype = np.dtype(_SCALAR_FORMATS[item_kind])
            if self._pos + count * dtype.itemsize > self.size:
                raise _Truncated
            items = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._pos)
            self._pos += count * dtype.itemsize
        elif item_kind == GGUFValueType.STRING:
            items = [self._string() for _ in range(count)]
        else:
            items = [self._value(item_kind, key, depth + 1) for _ in range(count)]
        return Value(kind, (item_kind, items))

    def _tensor_entry(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self._string(_MAX_NAME_BYTES).decode("utf-8", errors="replace")
        n_dims = self._unpack("<I")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise CheckpointError(
                f"{self.name}: tensor {name!r} has {n_dims} dimensions (1 to {_MAX_DIMS} expected)"
            )
        dims = tuple(self._unpack("<Q") for _ in range(n_dims))
        return name, dims, self._unpack("<I"), self._unpack("<Q")

    def _alignment(self) -> int:
        value = self.metadata.get("general.alignment")
        if value is None:
            return _DEFAULT_ALIGNMENT
        if value.kind != GGUFValueType.UINT32 or value.content == 0 or value.content & (value.content - 1):
            raise CheckpointError(f"{self.name}: general.alignment must be a power of two (uint32)")
        return value.content

    def _tensor_info(self, name: str, dims: tuple[int, ...], raw_type: int, relative: int) -> TensorInfo:
        try:
            ggml_type = GGMLQuantizationType(raw_type)
        except ValueError:
            raise CheckpointError(
                f"{self.name}: tensor {name!r} has unknown tensor type {raw_type}"
            ) from None
        if any(d == 0 or d > 1 << 40 for d in dims):
            raise CheckpointError(f"{self.name}: tensor {name!r} has implausible dimensions {list(dims)}")
        block_size, block_bytes = GGML_QUANT_SIZES[ggml_type]
        if dims[0] % block_size:
            raise CheckpointError(
                f"{self.name}: tensor {name!r} rows of {dims[0]} values do not fill whole {ggml_type.name} blocks"
            )
        n_bytes = math.prod(dims) // block_size * block_bytes
        offset = self.data_offset + relative
        if offset + n_bytes > self.size:
            raise CheckpointError(
                f"{self.name}: GGUF file is truncated: tensor {name} needs bytes up to {offset + n_bytes}, "
                f"the file has {self.size}"
            )
        return TensorInfo(name, ggml_type, tuple(reversed(dims)), offset, n_bytes)


def _align(position: int, alignment: int) -> int:
    return (position + alignment - 1) // alignment * alignment


_MISSING = object()


class GGUFMetadata:
    """Typed, range-checked access to a GGUF file's metadata."""

    def __init__(self, gguf: GGUFFile) -> None:
        self._values = gguf.metadata
        self.source = gguf.name

    def has(self, key: str) -> bool:
        return key in self._values

    def integer(self, key: str, default: Any = _MISSING, *, low: int = 0, high: int = 2**31) -> int:
        """An integer in ``[low, high]``."""
        value = self._get(key, _INTEGER_TYPES, "an integer")
        if value is None:
            return self._default(key, default)
        number = int(value.content)
        if not low <= number <= high:
            raise self._error(key, f"is {number}, outside the plausible range [{low}, {high}]")
        return number

    def number(self, key: str, default: Any = _MISSING, *, low: float = 0.0, high: float = math.inf) -> float:
        """A finite number in ``[low, high]``; float32 values keep their shortest spelling (1e-05)."""
        value = self._get(key, _FLOAT_TYPES | _INTEGER_TYPES, "a number")
        if value is None:
            return self._default(key, default)
        if value.kind == GGUFValueType.FLOAT32:
            number = float(str(np.float32(value.content)))
        else:
            number = float(value.content)
        if not math.isfinite(number) or not low <= number <= high:
            raise self._error(key, f"is {number}, outside the plausible range [{low}, {high}]")
        return number

    def string(self, key: str, default: Any = _MISSING, *, max_chars: int = 1 << 20) -> str:
        value = self._get(key, {GGUFValueType.STRING}, "a string")
        if value is None:
            return self._default(key, default)
        text = self._decode(key, value.content)
        if len(text) > max_chars:
            raise self._error(key, f"is a string of {len(text)} characters (at most {max_chars} expected)")
        return text

    def boolean(self, key: str, default: Any = _MISSING) -> bool:
        value = self._get(key, {GGUFValueType.BOOL}, "a boolean")
        return self._default(key, default) if value is None else bool(value.content)

    def strings(self, key: str, default: Any = _MISSING, *, max_items: int = 1 << 22) -> list[str]:
        items = self._array(key, {GGUFValueType.STRING}, "an array of strings", max_items)
        if items is None:
            return self._default(key, default)
        return [self._decode(key, item) for item in items]

    def integers(self, key: str, default: Any = _MISSING, *, max_items: int = 1 << 22) -> list[int]:
        items = self._array(key, _INTEGER_TYPES, "an array of integers", max_items)
        return self._default(key, default) if items is None else [int(v) for v in items.tolist()]

    def numbers(self, key: str, default: Any = _MISSING, *, max_items: int = 1 << 22) -> list[float]:
        """An array of numbers (float or integer items), e.g. a vocabulary's scores."""
        items = self._array(key, _FLOAT_TYPES | _INTEGER_TYPES, "an array of numbers", max_items)
        return self._default(key, default) if items is None else [float(v) for v in items.tolist()]

    def _get(self, key: str, allowed: set, what: str) -> Value | None:
        value = self._values.get(key)
        if value is not None and value.kind not in allowed:
            raise self._error(key, f"should be {what}, found {value.kind.name.lower()}")
        return value

    def _array(self, key: str, allowed: set, what: str, max_items: int):
        value = self._get(key, {GGUFValueType.ARRAY}, what)
        if value is None:
            return None
        item_kind, items = value.content
        if item_kind not in allowed:
            raise self._error(key, f"should be {what}, found an array of {item_kind.name.lower()}")
        if len(items) > max_items:
            raise self._error(key, f"has {len(items)} items (at most {max_items} expected)")
        return items

    def _decode(self, key: str, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._error(key, f"is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None

    def _default(self, key: str, default: Any) -> Any:
        if default is _MISSING:
            raise CheckpointError(f"{self.source}: GGUF metadata lacks the required key {key!r}")
        return default

    def _error(self, key: str, problem: str) -> CheckpointError:
        return CheckpointError(f"{self.source}: GGUF metadata {key!r} {problem}")
