"""A KV snapshot on disk: a small JSON header, then the raw KV, checked whole before any of it is used.

Layout: the 8 bytes ``MAGIC``, the header's length (uint32, little-endian), the
header (UTF-8 JSON), the payload: per layer the keys, then the values, each
``[kv_heads, tokens, head_dim]`` C-ordered in the header's dtype.

The header names what the KV belongs to and how to check it::

    format, model_key, dtype, num_layers, num_kv_heads, head_dim,
    num_tokens, token_ids, tokens_sha256, payload_bytes, payload_sha256

``token_ids`` are the ids the caches compare: a media position's is its
image's negative key id (``clika_runtime.engine.prompt_media``).

Like llama.cpp's slot files (a magic, a version and the token ids ahead of the
state, refused when the types or sizes disagree) and mlx-lm's prompt-cache
files (metadata beside the arrays), but keyed by the model too: ``model_key``
names the exact graph the KV was computed by, so KV of another model, export
or KV dtype is refused instead of being read as this one's.

A file is untrusted input: :func:`read_kv_file` checks its size against what
the header implies before reading the payload, bounds the header and the token
count, and checks both sha256s, raising :class:`KVFileError` naming the
problem. Writes are atomic (a temporary file beside the target, fsynced, then
renamed), so a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clika_runtime.engine.kv.kv_snapshot import KVSnapshot
from clika_runtime.engine.prompt_media import MEDIA_KEY_FLOOR

MAGIC = b"CLIKAKV\x01"
FORMAT_VERSION = 1
# The header holds the token ids as JSON: 8 MiB is room for far more than any context window.
MAX_HEADER_BYTES = 8 << 20
_LENGTH = struct.Struct("<I")
_DTYPES = ("float32", "float16", "int8")


class KVFileError(ValueError):
    """A KV file that cannot be used for this model (the message says why)."""


@dataclass(frozen=True)
class KVLayout:
    """What a KV file must hold to be installed: the model, dtype and per-layer shape, a token bound."""

    model_key: str
    dtype: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    max_tokens: int

    def payload_bytes(self, num_tokens: int) -> int:
        per_token = 2 * self.num_layers * self.num_kv_heads * self.head_dim * np.dtype(self.dtype).itemsize
        return per_token * num_tokens


def tokens_sha256(token_ids: tuple[int, ...] | list[int]) -> str:
    return hashlib.sha256(np.asarray(token_ids, dtype="<i8").tobytes()).hexdigest()


def write_kv_file(path: str | Path, snapshot: KVSnapshot, layout: KVLayout) -> Path:
    """Write ``snapshot`` (KV of ``layout``'s model) to ``path`` atomically; returns the path."""
    path = Path(path)
    arrays = [*snapshot.keys, *snapshot.values]
    expected = (layout.num_kv_heads, snapshot.num_tokens, layout.head_dim)
    for array in arrays:
        if array.shape != expected or str(array.dtype) != layout.dtype:
            raise ValueError(f"a KV layer of shape {array.shape} {array.dtype}; the layout says {expected}")
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(memoryview(np.ascontiguousarray(array)).cast("B"))
    header = {
        "format": FORMAT_VERSION,
        "model_key": layout.model_key,
        "dtype": layout.dtype,
        "num_layers": layout.num_layers,
        "num_kv_heads": layout.num_kv_heads,
        "head_dim": layout.head_dim,
        "num_tokens": snapshot.num_tokens,
        "token_ids": list(snapshot.token_ids),
        "tokens_sha256": tokens_sha256(snapshot.token_ids),
        "payload_bytes": layout.payload_bytes(snapshot.num_tokens),
        "payload_sha256": digest.hexdigest(),
    }
    encoded = json.dumps(header, separators=(",", ":")).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(MAGIC + _LENGTH.pack(len(encoded)) + encoded)
            for array in arrays:
                out.write(memoryview(np.ascontiguousarray(array)).cast("B"))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def read_kv_file(path: str | Path, layout: KVLayout) -> KVSnapshot:
    """The snapshot in ``path`` when it is KV of ``layout``'s model; KVFileError naming the problem otherwise."""
    path = Path(path)
    try:
        with path.open("rb") as source:
            size = os.fstat(source.fileno()).st_size
            header, start = _read_header(source, path, size)
            num_tokens, token_ids = _checked_header(header, path, layout)
            payload_bytes = layout.payload_bytes(num_tokens)
            if header.get("payload_bytes") != payload_bytes or size != start + payload_bytes:
                raise KVFileError(
                    f"{path}: {size - start} bytes of KV where {num_tokens} tokens take {payload_bytes} "
                    "(a truncated or padded file)"
                )
            payload = source.read(payload_bytes)
    except OSError as exc:
        raise KVFileError(f"cannot read the KV file {path}: {exc}") from None
    if len(payload) != payload_bytes:
        raise KVFileError(f"{path}: the KV ends early (the file changed while it was read)")
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise KVFileError(f"{path}: the KV does not match its sha256 (a damaged file)")
    return _snapshot(payload, token_ids, layout)


def _read_header(source: Any, path: Path, size: int) -> tuple[dict[str, Any], int]:
    lead = source.read(len(MAGIC) + _LENGTH.size)
    if len(lead) < len(MAGIC) + _LENGTH.size or lead[: len(MAGIC)] != MAGIC:
        raise KVFileError(f"{path} is not a KV file of this runtime (no {MAGIC!r} header)")
    (length,) = _LENGTH.unpack(lead[len(MAGIC) :])
    start = len(lead) + length
    if length > MAX_HEADER_BYTES or start > size:
        raise KVFileError(f"{path}: a header of {length} bytes in a file of {size} (a damaged file)")
    try:
        header = json.loads(source.read(length).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise KVFileError(f"{path}: the header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise KVFileError(f"{path}: the header is not a JSON object")
    return header, start


def _checked_header(header: dict[str, Any], path: Path, layout: KVLayout) -> tuple[int, tuple[int, ...]]:
    """The token count and ids, once the header says this is KV of ``layout``'s model."""
    if header.get("format") != FORMAT_VERSION:
        raise KVFileError(
            f"{path}: KV file format {header.get('format')!r}; this runtime reads {FORMAT_VERSION}"
        )
    if header.get("model_key") != layout.model_key:
        raise KVFileError(f"{path} holds KV of another model (or export, or KV dtype) than this one")
    for name in ("dtype", "num_layers", "num_kv_heads", "head_dim"):
        if header.get(name) != getattr(layout, name):
            raise KVFileError(
                f"{path}: {name} {header.get(name)!r}; this model's is {getattr(layout, name)!r}"
            )
    if layout.dtype not in _DTYPES:
        raise KVFileError(f"{path}: KV dtype {layout.dtype!r} is not one this runtime stores")
    num_tokens, ids = header.get("num_tokens"), header.get("token_ids")
    if (
        isinstance(num_tokens, bool)
        or not isinstance(num_tokens, int)
        or not 0 < num_tokens <= layout.max_tokens
    ):
        raise KVFileError(f"{path}: {num_tokens!r} tokens; this model holds 1 to {layout.max_tokens}")
    if (
        not isinstance(ids, list)
        or len(ids) != num_tokens
        or not all(
            isinstance(t, int) and not isinstance(t, bool) and MEDIA_KEY_FLOOR <= t < 2**31 for t in ids
        )
    ):
        raise KVFileError(f"{path}: the header's token ids are not {num_tokens} token ids")
    token_ids = tuple(ids)
    if tokens_sha256(token_ids) != header.get("tokens_sha256"):
        raise KVFileError(f"{path}: the token ids do not match their sha256 (a damaged file)")
    return num_tokens, token_ids


def _snapshot(payload: bytes, token_ids: tuple[int, ...], layout: KVLayout) -> KVSnapshot:
    shape = (layout.num_kv_heads, len(token_ids), layout.head_dim)
    flat = np.frombuffer(payload, dtype=layout.dtype).reshape(2, layout.num_layers, *shape)
    return KVSnapshot(token_ids, list(flat[0]), list(flat[1]))
