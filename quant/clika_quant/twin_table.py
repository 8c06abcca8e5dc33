"""A token table that is a coarser rounding of the output head is read from the head's bytes.

Models trained with tied embeddings (Qwen2.5 0.5B-3B, SmolLM2, Gemma) have one matrix for
the token table and the output head. A GGUF may still store it twice, rounded to two block
types (Qwen2.5-Coder-0.5B Q4_K_M: a Q5_0 table beside a Q8_0 head; the 1.5B: Q4_K beside
Q6_K), and the export kept both: +153 MB of an 803 MB folder. When the two dequantize to the
same matrix within the coarser type's rounding, the table's rows are gathered from the head's
finer blocks instead: the embedding then differs from the GGUF table's values by that
rounding, towards the trained matrix (the head's type has the smaller error).

"Within the rounding" is measured on a sample of rows: the relative difference of two roundings
of one matrix is the coarser type's error (Q5_0: ~3%, Q4_K: ~6%); two different matrices
differ by ~140%. ``TWIN_LIMIT`` sits far from both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from clika_runtime.kernels.transcode import TRANSCODABLE, transcode

EMBED, HEAD = "embed", "lm_head"
# Relative difference below which a table and a head are two roundings of one matrix.
TWIN_LIMIT = 0.25
# Bits per weight of each block type: the head must be at least as fine as the table.
_BITS_PER_WEIGHT = {
    "Q4_0": 4.5,
    "Q4_1": 5.0,
    "Q4_K": 4.5,
    "Q5_0": 5.5,
    "Q5_1": 6.0,
    "Q5_K": 5.5,
    "Q6_K": 6.5625,
    "Q8_0": 8.5,
}
_SAMPLE_ROWS = 512


def read_table_from_head(
    matrices: dict[str, dict[str, Any]], raw: Callable[[str], Any]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """``matrices`` with the table's consumers moved onto the head when they are twins.

    Returns the new mapping and the record of the measurement (None when nothing moved).
    """
    table = _only(matrices, EMBED)
    head = _only(matrices, HEAD)
    if table is None or head is None:
        return matrices, None
    table_blocks, head_blocks = (_single_source(matrices[name], raw) for name in (table, head))
    if table_blocks is None or head_blocks is None or table_blocks.shape != head_blocks.shape:
        return matrices, None
    if _BITS_PER_WEIGHT[head_blocks.ggml_type] < _BITS_PER_WEIGHT[table_blocks.ggml_type]:
        return matrices, None
    difference = _relative_difference(table_blocks, head_blocks)
    note = {
        "table": table,
        "table_type": table_blocks.ggml_type,
        "head": head,
        "head_type": head_blocks.ggml_type,
        "rel_difference": round(difference, 5),
        "limit": TWIN_LIMIT,
    }
    if not difference < TWIN_LIMIT:
        return matrices, {**note, "read_from_head": False}
    merged = {name: info for name, info in matrices.items() if name != table}
    head_info = dict(matrices[head])
    head_info["roles"] = [EMBED, *head_info["roles"]]
    head_info["nodes"] = [*matrices[table]["nodes"], *head_info["nodes"]]
    merged[head] = head_info
    return merged, {**note, "read_from_head": True}


def _only(matrices: dict[str, dict[str, Any]], role: str) -> str | None:
    names = [name for name, info in matrices.items() if list(info["roles"]) == [role]]
    return names[0] if len(names) == 1 else None


def _single_source(info: dict[str, Any], raw: Callable[[str], Any]):
    sources = list(info.get("sources") or [])
    if len(sources) != 1:
        return None
    blocks = raw(sources[0])
    if blocks is None or blocks.ggml_type not in TRANSCODABLE or blocks.ggml_type not in _BITS_PER_WEIGHT:
        return None
    return blocks


def _relative_difference(table, head) -> float:
    """||T - H|| / ||H|| over evenly spaced rows (both dequantized exactly)."""
    rows, cols = table.shape
    step = max(1, rows // _SAMPLE_ROWS)
    picked = slice(0, rows, step)
    count = len(range(0, rows, step))
    t = transcode(table.ggml_type, np.asarray(table.data)[picked], (count, cols)).dequantize()
    h = transcode(head.ggml_type, np.asarray(head.data)[picked], (count, cols)).dequantize()
    norm = float(np.linalg.norm(h.astype(np.float64)))
    if norm == 0.0:
        return float("inf")
    return float(np.linalg.norm((t - h).astype(np.float64)) / norm)
