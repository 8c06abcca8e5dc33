"""The paged step graph's contract: its input names, the pools' layout and the packer of one step.

The paged graph (``clika_export.graph.paged_attention`` documents it) keeps
each layer's K/V in a pool of fixed-size blocks ``[num_blocks, kv_heads,
block_size, head_dim]``; a row reads its KV through its block table and
writes its new tokens' K/V into the pool slots ``slot_mapping`` names. New
tokens of all rows are packed along ``T`` as in the continuous graph; rows
with one new token (decode rows) and rows with more (prompt chunks, "wide"
rows) are attended in two groups, each padded only to its own shape.

Every array is built here from ``PagedRow``s, in the order the rows are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# The media inputs are the continuous graph's (``clika_runtime.contract.step_graph.pack_media``), kept by
# the paged derivation: the packed token rows are the same in both graphs.
from clika_runtime.contract.step_graph import MEDIA_EMBEDS, MEDIA_INPUTS, MEDIA_ROWS, logits_rows  # noqa: F401

# The pools' layout, as the manifest's KVSpec.layout names it: [kv_heads, blocks, block_size, head_dim].
PAGED_LAYOUT = "NBSH"

INPUT_IDS = "input_ids"
POSITION_IDS = "position_ids"
SLOT_MAPPING = "slot_mapping"
DECODE_QUERY_INDEX = "decode_query_index"
DECODE_BLOCK_TABLES = "decode_block_tables"
WIDE_QUERY_INDEX = "wide_query_index"
WIDE_BLOCK_TABLES = "wide_block_tables"
TOKEN_INDEX = "token_index"
LOGITS_INDEX = "logits_index"
PAGED_STEP_INPUTS = (
    INPUT_IDS,
    POSITION_IDS,
    SLOT_MAPPING,
    DECODE_QUERY_INDEX,
    DECODE_BLOCK_TABLES,
    WIDE_QUERY_INDEX,
    WIDE_BLOCK_TABLES,
    TOKEN_INDEX,
    LOGITS_INDEX,
)


class PagedRow(NamedTuple):
    """One sequence's work this step: ``new_token_ids`` after ``past_len`` cached tokens.

    ``block_table`` lists the pool blocks holding the row's positions
    ``[0, past_len + len(new_token_ids))``, in order.
    """

    past_len: int
    new_token_ids: Sequence[int]
    block_table: Sequence[int]
    want_all_logits: bool = False


@dataclass(frozen=True)
class PagedStepInputs:
    """The paged graph's inputs for one step, plus where each row's logits land."""

    input_ids: np.ndarray  # int64 [T]
    position_ids: np.ndarray  # int64 [T]
    slot_mapping: np.ndarray  # int64 [T]
    decode_query_index: np.ndarray  # int64 [Bd, 1]
    decode_block_tables: np.ndarray  # int64 [Bd, Md]
    wide_query_index: np.ndarray  # int64 [Bw, Sw]
    wide_block_tables: np.ndarray  # int64 [Bw, Mw]
    token_index: np.ndarray  # int64 [T]
    logits_index: np.ndarray  # int64 [N]
    logits_rows: tuple[slice, ...]  # per row: its rows of the logits output

    def feeds(self) -> dict[str, np.ndarray]:
        """The arrays by graph input name (the KV pools are bound separately)."""
        return {name: getattr(self, name) for name in PAGED_STEP_INPUTS}


def pack_paged_step(
    rows: Sequence[PagedRow], *, block_size: int, context_window: int | None = None
) -> PagedStepInputs:
    """Build the paged graph's inputs from ``rows`` (each with new tokens and a block table covering them)."""
    if not rows:
        raise ValueError("a step needs at least one row")
    counts = np.array([len(r.new_token_ids) for r in rows], dtype=np.int64)
    past = np.array([r.past_len for r in rows], dtype=np.int64)
    _check_rows(rows, counts, past, block_size, context_window)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    total = int(counts.sum())
    input_ids = np.fromiter((t for r in rows for t in r.new_token_ids), dtype=np.int64, count=total)
    row_of_token = np.repeat(np.arange(len(rows)), counts)
    col_of_token = np.arange(total) - starts[row_of_token]
    position_ids = past[row_of_token] + col_of_token
    tables = [np.asarray(r.block_table, dtype=np.int64) for r in rows]
    blocks = np.concatenate(
        [tables[b][np.arange(past[b], past[b] + counts[b]) // block_size] for b in range(len(rows))]
    )
    slot_mapping = blocks * block_size + position_ids % block_size

    decode = np.flatnonzero(counts == 1)
    wide = np.flatnonzero(counts > 1)
    width = int(counts[wide].max()) if wide.size else 1
    # Where each packed token's attention output sits: decode rows first, then the wide grid.
    group_row = np.empty(len(rows), dtype=np.int64)
    group_row[decode] = np.arange(decode.size)
    group_row[wide] = decode.size + np.arange(wide.size) * width
    token_index = np.where(
        counts[row_of_token] == 1, group_row[row_of_token], group_row[row_of_token] + col_of_token
    )
    cols = np.minimum(np.arange(width)[None, :], counts[wide, None] - 1)
    logits_index, row_logits = logits_rows([r.want_all_logits for r in rows], counts, starts)
    return PagedStepInputs(
        input_ids=input_ids,
        position_ids=position_ids,
        slot_mapping=slot_mapping,
        decode_query_index=starts[decode].reshape(-1, 1),
        decode_block_tables=_block_tables([tables[b] for b in decode], past[decode] + 1, block_size),
        wide_query_index=(starts[wide, None] + cols).reshape(wide.size, width),
        wide_block_tables=_block_tables([tables[b] for b in wide], past[wide] + counts[wide], block_size),
        token_index=token_index,
        logits_index=logits_index,
        logits_rows=row_logits,
    )


def _block_tables(tables: list[np.ndarray], lengths: np.ndarray, block_size: int) -> np.ndarray:
    """``[rows, most blocks]``: each row's blocks covering its length; padding reads block 0 (masked)."""
    needed = -(-lengths // block_size) if len(tables) else np.zeros(0, dtype=np.int64)
    out = np.zeros((len(tables), max(int(needed.max()) if len(tables) else 1, 1)), dtype=np.int64)
    for b, table in enumerate(tables):
        out[b, : needed[b]] = table[: needed[b]]
    return out


def _check_rows(
    rows: Sequence[PagedRow],
    counts: np.ndarray,
    past: np.ndarray,
    block_size: int,
    context_window: int | None,
) -> None:
    if (counts == 0).any():
        raise ValueError(
            f"row {int(np.argmax(counts == 0))} has no new tokens (a paged step has no idle rows)"
        )
    if (past < 0).any():
        raise ValueError(f"row {int(np.argmax(past < 0))} has a negative past_len")
    for b, row in enumerate(rows):
        need = -(-(row.past_len + len(row.new_token_ids)) // block_size)
        if len(row.block_table) < need:
            raise ValueError(
                f"row {b} holds {row.past_len + len(row.new_token_ids)} tokens after this step but its "
                f"block table has {len(row.block_table)} blocks of {block_size}"
            )
    if context_window is not None and ((over := past + counts > context_window).any()):
        b = int(np.argmax(over))
        raise ValueError(
            f"row {b} would hold {int(past[b] + counts[b])} tokens, more than the model's "
            f"context window {context_window}"
        )
