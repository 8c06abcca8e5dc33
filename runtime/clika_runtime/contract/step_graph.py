"""The step graph's contract: its input/output names, layouts and the packer of one step.

Export builds graphs with these names and verifies them with ``pack_step``;
the engine feeds them with the same arrays (``clika_runtime.engine.decode_packer``
is its decode-only fast path, equal to ``pack_step``). It lives beside the
manifest, the rest of the contract between a model folder and the runtime.

A step runs a batch of rows, one per KV slot. Row ``b`` has ``past_len`` tokens
already in its cache and ``new_token_ids`` to run now (none: an idle row). The
new tokens of all rows are packed along one axis ``T`` (the weight MatMuls see
only real tokens); attention works on a padded grid ``[B, S]``, ``S`` = the
most new tokens any row has this step, each row's tokens left-aligned in its
grid row. ``grid_index[row, col]`` names the packed token filling each cell
(a Gather by it turns ``[T, D]`` into ``[B, S, D]``) and ``token_cell[t]`` is
the ``(row, col)`` of packed token ``t`` (a GatherND by it turns ``[B, S, D']``
back into ``[T, D']``).

Graphs exported before that form (``GridLayout.FLAT``) take ``grid_index``
flat, ``[B * S]``, and ``token_index[t] = row * S + col`` instead of
``token_cell``; ``grid_layout`` tells the two apart from a graph's input names
and ``FlatGridFeeds`` turns this module's feeds into theirs.

What GroupQueryAttention needs per row (measured on onnxruntime 1.32, CPU):

========================  =================  ==========================  ==========================
row kind                  ``query_seqlens``  ``seqlens_k``               constraint
========================  =================  ==========================  ==========================
idle (no new tokens)      0                  0                           ``1 + S <= capacity``
prefill (no past)         ``q``              ``q - 1``                   ``S <= capacity``
decode                    1                  ``past_len``                ``past_len + S <= capacity``
chunked prefill / spec.   ``q``              ``past_len + q - 1``        ``past_len + S <= capacity``
========================  =================  ==========================  ==========================

* Only rows ``[past_len, past_len + q)`` of a row's cache are written; grid
  padding never enters the cache. Rotary positions are ``past_len + col``,
  computed inside the op, so the graph takes no position ids (but for an
  M-RoPE model's positions off the KV index: ``MROPE_INPUTS``).
* ONNX Runtime refuses a step where an active row's ``past_len + S`` exceeds
  the cache capacity (it needs room for the whole padded chunk), even though
  it writes only ``q`` rows. Give the buffer slack above the context window
  (the widest step) or keep rows near their end out of wide steps.
* An idle row's ``seqlens_k`` is 0, not ``past_len - 1``: that claims one
  cached token (the least the op accepts), which keeps its checks satisfied
  for an empty slot and frees a full slot from the capacity rule but for that
  one token; its cache is left as it was.
* ``total_sequence_length`` is the largest ``seqlens_k + 1`` of the step. It
  must not exceed the rotary table (the context window); its value does not
  change the step's cost.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

INPUT_IDS = "input_ids"
GRID_INDEX = "grid_index"
TOKEN_CELL = "token_cell"
TOKEN_INDEX = "token_index"  # the flat layout's token -> cell map (graphs exported before token_cell)
QUERY_SEQLENS = "query_seqlens"
SEQLENS_K = "seqlens_k"
TOTAL_SEQUENCE_LENGTH = "total_sequence_length"
LOGITS_INDEX = "logits_index"
STEP_INPUTS = (
    INPUT_IDS,
    GRID_INDEX,
    TOKEN_CELL,
    QUERY_SEQLENS,
    SEQLENS_K,
    TOTAL_SEQUENCE_LENGTH,
    LOGITS_INDEX,
)
# A graph exported with a vision tower also takes embeddings for the media positions of the
# step's packed tokens: row ``media_rows[m]`` of the token embeddings is replaced by
# ``media_embeds[m]`` before the first layer (M = 0 on a text-only step). Graphs without them
# (text-only exports) are told apart by their input names (``takes_media``).
MEDIA_EMBEDS = "media_embeds"  # float32 [M, hidden]
MEDIA_ROWS = "media_rows"  # int64 [M]: packed token rows, distinct, each < T
MEDIA_INPUTS = (MEDIA_EMBEDS, MEDIA_ROWS)
# A graph of an M-RoPE model (Qwen2-VL) rotates each token by three positions (temporal,
# height, width). A token's three are its KV index ``past_len + col`` but for the rows
# ``mrope_rows`` names, which take ``mrope_positions`` (a sequence's image tokens and what
# follows them). R = 0 rotates every token by its KV index, the plain rope: runs on text feed
# them empty (``text_only_media``); ``takes_mrope`` tells such a graph by its input names.
MROPE_ROWS = "mrope_rows"  # int64 [R]: packed token rows, distinct, each < T
MROPE_POSITIONS = "mrope_positions"  # int64 [R, 3]: their (temporal, height, width) positions
MROPE_INPUTS = (MROPE_ROWS, MROPE_POSITIONS)
LOGITS = "logits"
# The final norm of every packed token ``[T, hidden]``: what embeddings pool (the engine leaves it unbound).
HIDDEN_STATES = "hidden_states"
PAST_KEY = "past_key.{layer}"
PAST_VALUE = "past_value.{layer}"
PRESENT_KEY = "present_key.{layer}"
PRESENT_VALUE = "present_value.{layer}"


class GridLayout(enum.Enum):
    """How a continuous step graph takes the map between packed tokens and the attention grid."""

    CELLS = "cells"  # grid_index int64 [B, S], token_cell int64 [T, 2] (row, col)
    FLAT = "flat"  # grid_index int64 [B * S], token_index int64 [T] = row * S + col (older exports)


def grid_layout(input_names: Iterable[str]) -> GridLayout | None:
    """The grid layout a graph's input names declare; None for a graph without the grid (paged)."""
    names = set(input_names)
    if GRID_INDEX not in names:
        return None
    if TOKEN_CELL in names:
        return GridLayout.CELLS
    if TOKEN_INDEX in names:
        return GridLayout.FLAT
    raise ValueError(
        f"the step graph takes {GRID_INDEX} but neither {TOKEN_CELL} nor {TOKEN_INDEX}: "
        f"not a step graph this runtime knows (inputs: {', '.join(sorted(names))})"
    )


def takes_media(input_names: Iterable[str]) -> bool:
    """True when a step graph (continuous or paged) takes media embeddings for its token rows."""
    return _takes_pair(input_names, MEDIA_INPUTS)


def text_only_media(inputs: Iterable[object]) -> dict[str, np.ndarray]:
    """The media inputs (M = 0) and M-RoPE inputs (R = 0) to bind once on a graph that takes
    them, for runs that feed text alone (verification, calibration); ``{}`` for a graph
    without. ``inputs``: a session's ``get_inputs()`` (objects with ``name`` and ``shape``)."""
    shapes = {getattr(value, "name", ""): getattr(value, "shape", None) for value in inputs}
    feeds = pack_mrope([]) if takes_mrope(shapes) else {}
    if not takes_media(shapes):
        return feeds
    shape = shapes[MEDIA_EMBEDS] or []
    width = shape[1] if len(shape) == 2 and isinstance(shape[1], int) else 0
    return {**feeds, **pack_media([], width)}


def takes_mrope(input_names: Iterable[str]) -> bool:
    """True when a step graph rotates by M-RoPE positions (``mrope_rows`` / ``mrope_positions``)."""
    return _takes_pair(input_names, MROPE_INPUTS)


def _takes_pair(input_names: Iterable[str], pair: tuple[str, str]) -> bool:
    """True when a step graph takes both inputs of ``pair``, False when neither: one alone
    is a graph this runtime cannot feed."""
    names = set(input_names)
    if names.isdisjoint(pair):
        return False
    if not names.issuperset(pair):
        raise ValueError(f"the step graph takes one of {pair[0]} / {pair[1]} without the other")
    return True


class RopeSpan(NamedTuple):
    """A sequence's rotary positions where they differ from its KV indices.

    KV index ``rows[r]`` (ascending, all inside the prompt) rotates by ``positions[r]``
    (temporal, height, width); every index past the prompt's ``prompt_len`` rotates by
    ``index + delta`` in all three (0: by its index).
    """

    rows: np.ndarray  # int64 [R], ascending
    positions: np.ndarray  # int64 [R, 3]
    prompt_len: int
    delta: int


def pack_mrope(spans: Sequence[tuple[RopeSpan | None, int, int]]) -> dict[str, np.ndarray]:
    """The M-RoPE inputs of one step from ``(span, start, count)`` per row, in packing order.

    A row runs the KV indices ``[start, start + count)`` of its sequence; those whose
    positions differ from their index land at the row's packed offset plus ``index - start``.
    """
    rows: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    offset = 0
    for span, start, count in spans:
        if span is not None:
            lo, hi = np.searchsorted(span.rows, [start, start + count])
            if hi > lo:
                rows.append(span.rows[lo:hi] - start + offset)
                positions.append(span.positions[lo:hi])
            after = np.arange(max(start, span.prompt_len), start + count, dtype=np.int64)
            if span.delta and len(after):
                rows.append(after - start + offset)
                positions.append(np.repeat((after + span.delta)[:, None], 3, axis=1))
        offset += count
    if not rows:
        return {
            MROPE_ROWS: np.zeros(0, dtype=np.int64),
            MROPE_POSITIONS: np.zeros((0, 3), dtype=np.int64),
        }
    return {
        MROPE_ROWS: np.concatenate(rows).astype(np.int64),
        MROPE_POSITIONS: np.ascontiguousarray(np.concatenate(positions), dtype=np.int64),
    }


class MediaSpan(NamedTuple):
    """A sequence's media rows in prompt order: ``positions[m]`` takes ``embeds[m]``."""

    positions: np.ndarray  # int64 [M], ascending prompt positions
    embeds: np.ndarray  # float32 [M, hidden]


def pack_media(spans: Sequence[tuple[MediaSpan | None, int, int]], hidden_size: int) -> dict[str, np.ndarray]:
    """The media inputs of one step from ``(span, start, count)`` per row, in packing order.

    A row runs the positions ``[start, start + count)`` of its sequence; the media
    positions among them land at the row's packed offset plus ``position - start``.
    A step without media gives ``M = 0`` (empty arrays of the right dtypes and width).
    """
    rows: list[np.ndarray] = []
    embeds: list[np.ndarray] = []
    offset = 0
    for span, start, count in spans:
        if span is not None and len(span.positions):
            lo, hi = np.searchsorted(span.positions, [start, start + count])
            if hi > lo:
                rows.append(span.positions[lo:hi] - start + offset)
                embeds.append(span.embeds[lo:hi])
        offset += count
    if not rows:
        return {
            MEDIA_EMBEDS: np.zeros((0, hidden_size), dtype=np.float32),
            MEDIA_ROWS: np.zeros(0, dtype=np.int64),
        }
    return {
        MEDIA_EMBEDS: np.ascontiguousarray(np.concatenate(embeds), dtype=np.float32),
        MEDIA_ROWS: np.concatenate(rows).astype(np.int64),
    }


class StepRow(NamedTuple):
    """One KV slot's work this step."""

    past_len: int
    new_token_ids: Sequence[int]
    want_all_logits: bool = False


@dataclass(frozen=True)
class StepInputs:
    """The step graph's inputs for one step, plus where each row's logits land."""

    input_ids: np.ndarray  # int64 [T]
    grid_index: np.ndarray  # int64 [B, S]: the packed token that fills each grid cell
    token_cell: np.ndarray  # int64 [T, 2]: the grid cell (row, col) of each packed token
    query_seqlens: np.ndarray  # int32 [B]
    seqlens_k: np.ndarray  # int32 [B]
    total_sequence_length: np.ndarray  # int32 scalar
    logits_index: np.ndarray  # int64 [N]
    logits_rows: tuple[slice, ...]  # per row: its rows of the logits output (empty when none)
    width: int  # S, the grid's row length

    def feeds(self, layout: GridLayout = GridLayout.CELLS) -> dict[str, np.ndarray]:
        """The arrays by graph input name for a graph of ``layout`` (the KV inputs are bound separately)."""
        feeds = {name: getattr(self, name) for name in STEP_INPUTS}
        return feeds if layout is GridLayout.CELLS else FlatGridFeeds().convert(feeds)


def pack_step(
    rows: Sequence[StepRow | tuple[int, Sequence[int], bool]],
    *,
    capacity: int | None = None,
    context_window: int | None = None,
) -> StepInputs:
    """Build the step graph's inputs from ``(past_len, new_token_ids, want_all_logits)`` rows.

    There is one row per KV slot (``B`` = the cache's first dimension); a row
    with no new tokens is idle. A row that wants all logits gets one logits row
    per new token (perplexity, speculative checks), any other active row one,
    for its last token. ``capacity`` (the cache's sequence dimension) and
    ``context_window`` (the rotary table's length) are checked when given.
    """
    if not rows:
        raise ValueError("a step needs at least one row")
    counts = np.array([len(row[1]) for row in rows], dtype=np.int64)
    past = np.array([row[0] for row in rows], dtype=np.int64)
    if (past < 0).any():
        raise ValueError(f"row {int(np.argmax(past < 0))} has a negative past_len")
    if counts.sum() == 0:
        raise ValueError("a step needs at least one row with new tokens (all rows are idle)")
    width = int(counts.max())
    active = counts > 0
    _check_room(past, counts, width, active, capacity, context_window)

    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    input_ids = np.fromiter((tok for row in rows for tok in row[1]), dtype=np.int64, count=int(counts.sum()))
    row_of_token = np.repeat(np.arange(len(rows)), counts)
    col_of_token = np.arange(len(input_ids)) - starts[row_of_token]
    token_cell = np.stack([row_of_token, col_of_token], axis=1)

    # Padding cells repeat the row's last token (any real token would do: their
    # results are discarded and never reach the cache); idle rows take token 0.
    cols = np.minimum(np.arange(width)[None, :], np.maximum(counts - 1, 0)[:, None])
    grid_index = np.where(active[:, None], starts[:, None] + cols, 0)

    seqlens_k = np.where(active, past + counts - 1, 0)
    want_all = [bool(row[2]) if len(row) > 2 else False for row in rows]
    logits_index, row_logits = logits_rows(want_all, counts, starts)
    return StepInputs(
        input_ids=input_ids,
        grid_index=grid_index.astype(np.int64),
        token_cell=token_cell.astype(np.int64),
        query_seqlens=counts.astype(np.int32),
        seqlens_k=seqlens_k.astype(np.int32),
        total_sequence_length=np.array(int(seqlens_k.max()) + 1, dtype=np.int32),
        logits_index=logits_index,
        logits_rows=row_logits,
        width=width,
    )


def _check_room(
    past: np.ndarray,
    counts: np.ndarray,
    width: int,
    active: np.ndarray,
    capacity: int | None,
    context_window: int | None,
) -> None:
    if capacity is not None:
        # GQA counts an idle row as holding one token (its seqlens_k is 0).
        held = np.where(active, past, 1)
        b = _first_row(held + width > capacity)
        if b is not None:
            raise ValueError(
                f"row {b} holds {int(held[b])} cached tokens: a step {width} tokens wide does not fit "
                f"its KV capacity {capacity} (the runtime needs past_len + step width <= capacity, "
                f"counting an idle row as 1)"
            )
    if context_window is not None:
        b = _first_row(past + counts > context_window)
        if b is not None:
            raise ValueError(
                f"row {b} would hold {int(past[b] + counts[b])} tokens, more than the model's "
                f"context window {context_window}"
            )


def _first_row(over: np.ndarray) -> int | None:
    """The first row flagged in ``over``, or None when none is."""
    return int(np.argmax(over)) if over.any() else None


def logits_rows(
    want_all: Sequence[bool], counts: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, tuple[slice, ...]]:
    """The packed tokens whose logits the graph returns, and each row's slice of them.

    A row that wants all logits gets one per new token, any other active row its
    last token's, an idle row (no new tokens) none. The paged graph packs the same way.
    """
    picked: list[np.ndarray] = []
    slices: list[slice] = []
    at = 0
    for b, wants_all in enumerate(want_all):
        count = int(counts[b])
        if count == 0:
            index = np.empty(0, dtype=np.int64)
        elif wants_all:
            index = np.arange(starts[b], starts[b] + count, dtype=np.int64)
        else:
            index = np.array([starts[b] + count - 1], dtype=np.int64)
        picked.append(index)
        slices.append(slice(at, at + len(index)))
        at += len(index)
    return np.concatenate(picked), tuple(slices)


class FlatGridFeeds:
    """Turns feeds of the ``CELLS`` layout into the ``FLAT`` one of graphs exported before it.

    A pair of read-only grid arrays (``DecodePacker``'s, shared across steps) is converted
    once and its read-only result handed out again, so the executor still sees an unchanged
    array and skips copying it.
    """

    def __init__(self) -> None:
        self._last: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def convert(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``feeds`` with ``grid_index`` flattened and ``token_cell`` replaced by ``token_index``."""
        converted = dict(feeds)
        grid, cells = converted[GRID_INDEX], converted.pop(TOKEN_CELL)
        last = self._last
        if last is not None and last[0] is grid and last[1] is cells:
            converted[GRID_INDEX], converted[TOKEN_INDEX] = last[2], last[3]
            return converted
        flat = grid.reshape(-1)
        token_index = cells[:, 0] * grid.shape[1] + cells[:, 1]
        if not grid.flags.writeable and not cells.flags.writeable:
            token_index.flags.writeable = False  # the reshape of a read-only array is read-only already
            self._last = (grid, cells, flat, token_index)
        converted[GRID_INDEX], converted[TOKEN_INDEX] = flat, token_index
        return converted
