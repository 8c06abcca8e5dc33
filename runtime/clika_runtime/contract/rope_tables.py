"""Rotary tables a folder's graphs hold as empty placeholders, computed when a session opens.

The manifest's ``rope_tables`` lists, per rope the layers use, the cos and sin
initializer names (stored in every graph as ``[0, rotary_dim / 2]``
placeholders) and what they are computed from: positions (the context
window), rotary dims (fewer than ``head_dim`` for a partial rotary), theta and
transformers' scaling dict. Gemma 3 has two entries: its global rope and its
sliding layers' local one. ``clika_runtime.contract.model_folder.open_session`` computes
them with ``clika_runtime.contract.rope`` and hands them to ONNX Runtime
(``SessionOptions.add_initializer``), which reads them in place.

Why computed: stored, they are 1-1.5% of a llama or qwen2 folder and 17.7% of
gemma-3-270m int4's at 32,768 positions (67 of 379 MB), and grow with the
context window (2 GiB at 2^20 positions for gemma's two ropes); computing
gemma's two took 0.1-0.3 s and opening its folder took as long as with stored
tables within a loaded machine's noise (``benchmarks/features/rope_tables.py
--compare``, benchmarks/README.md). A folder whose manifest has
no ``rope_tables`` stores its tables and opens as before.

The manifest is untrusted: every field is type- and bound-checked when it is
read, and the most any manifest makes the runtime allocate is
``MAX_TABLE_BYTES``, what the exporter's largest context window stores for the
widest rope it builds. The scaling's values are checked when the tables are
computed (the frequencies first, before any table is allocated): reading a
manifest needs the standard library only (the store lists folders without
NumPy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# The exporter's largest context window; a table of more positions is refused.
MAX_POSITIONS = 1 << 20
# Wider than any head a family builds (256 for Gemma 3, 512 for the widest heads there are).
MAX_ROTARY_DIM = 512
MAX_TABLES = 4  # a folder has one rope per attention kind (Gemma 3: global and local)
# Two ropes of 2^20 positions at the widest rotary dims: what the tables would take stored.
MAX_TABLE_BYTES = 4 << 30
TABLE_DTYPES = ("float32",)  # the attention's query dtype
_ITEM_BYTES = {"float32": 4}
_MAX_NAME = 256
_MAX_SCALING_KEYS = 32


class RopeTableError(ValueError):
    """A ``rope_tables`` entry that is malformed or out of bounds (the message names the field)."""


@dataclass(frozen=True)
class RopeTable:
    """One rope's cos/sin initializers and the parameters they are computed from."""

    cos: str  # initializer names, the same in every graph of the folder
    sin: str
    positions: int
    rotary_dim: int
    theta: float
    scaling: dict[str, Any] | None = None  # transformers' rope scaling dict; None: the default rope
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        """Bytes of the cos and sin tables together."""
        return 2 * self.positions * (self.rotary_dim // 2) * _ITEM_BYTES[self.dtype]


def computed_initializers(tables: tuple[RopeTable, ...]) -> dict[str, np.ndarray]:
    """Every table of ``tables`` computed, by initializer name; a RopeTableError naming the entry
    whose scaling gives no table (raised from its frequencies, before its table is allocated)."""
    from clika_runtime.contract.rope import RopeError, cos_sin_caches  # NumPy: only once tables are computed

    arrays = {}
    for i, table in enumerate(tables):
        try:
            arrays[table.cos], arrays[table.sin] = cos_sin_caches(
                table.positions, table.rotary_dim, table.theta, table.scaling
            )
        except RopeError as exc:
            raise RopeTableError(f"rope_tables[{i}].scaling: {exc}") from None
    return arrays


def rope_tables_from_json(value: Any, *, context_window: int, head_dim: int) -> tuple[RopeTable, ...]:
    """The manifest's ``rope_tables`` (absent: none), every field checked before anything is computed."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TABLES:
        raise RopeTableError(
            f"rope_tables must be a list of at most {MAX_TABLES} tables, got {_short(value)}"
        )
    tables = tuple(
        _table(entry, f"rope_tables[{i}]", context_window, head_dim) for i, entry in enumerate(value)
    )
    names = [name for table in tables for name in (table.cos, table.sin)]
    if len(set(names)) != len(names):
        raise RopeTableError(f"rope_tables names an initializer twice: {sorted(names)}")
    total = sum(table.nbytes for table in tables)
    if total > MAX_TABLE_BYTES:
        raise RopeTableError(f"rope_tables would take {total} bytes, more than the {MAX_TABLE_BYTES} allowed")
    return tables


def _table(entry: Any, where: str, context_window: int, head_dim: int) -> RopeTable:
    if not isinstance(entry, dict):
        raise RopeTableError(f"{where} must be an object, got {_short(entry)}")
    unknown = set(entry) - {f.name for f in fields(RopeTable)}
    if unknown:
        raise RopeTableError(f"{where} has unknown fields {sorted(unknown)}")
    try:
        cos, sin = _name(entry["cos"], f"{where}.cos"), _name(entry["sin"], f"{where}.sin")
        positions = _integer(entry["positions"], f"{where}.positions", 1, MAX_POSITIONS)
        rotary_dim = _integer(entry["rotary_dim"], f"{where}.rotary_dim", 2, min(head_dim, MAX_ROTARY_DIM))
        theta = entry["theta"]
    except KeyError as exc:
        raise RopeTableError(f"{where} is missing the field {exc.args[0]!r}") from None
    if positions != context_window:
        raise RopeTableError(f"{where}.positions {positions} is not the context_window {context_window}")
    if rotary_dim % 2:
        raise RopeTableError(f"{where}.rotary_dim must be even, got {rotary_dim}")
    if (
        isinstance(theta, bool)
        or not isinstance(theta, int | float)
        or not math.isfinite(theta)
        or theta <= 1
    ):
        raise RopeTableError(f"{where}.theta must be a finite number above 1, got {_short(theta)}")
    dtype = entry.get("dtype", "float32")
    if dtype not in TABLE_DTYPES:
        raise RopeTableError(f"{where}.dtype must be one of {', '.join(TABLE_DTYPES)}, got {_short(dtype)}")
    scaling = _scaling(entry.get("scaling"), f"{where}.scaling", rotary_dim)
    return RopeTable(cos, sin, positions, rotary_dim, float(theta), scaling, dtype)


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
        raise RopeTableError(
            f"{where} must be an initializer name of 1 to {_MAX_NAME} characters, got {_short(value)}"
        )
    return value


def _integer(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RopeTableError(f"{where} must be an integer from {low} to {high}, got {_short(value)}")
    return value


def _scaling(value: Any, where: str, rotary_dim: int) -> dict[str, Any] | None:
    """None or a flat dict of numbers, strings, booleans and number lists no longer than the frequencies."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > _MAX_SCALING_KEYS:
        raise RopeTableError(f"{where} must be null or an object of at most {_MAX_SCALING_KEYS} keys")
    for key, item in value.items():
        if isinstance(item, list):
            numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in item)
            if not numbers or len(item) > rotary_dim // 2:
                raise RopeTableError(f"{where}.{key} must be a list of at most {rotary_dim // 2} numbers")
        elif item is not None and not isinstance(item, str | int | float | bool):
            raise RopeTableError(f"{where}.{key} must be a number, a string, a boolean or a list of numbers")
    return dict(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
