"""A step's grammar work: the masks of its constrained rows, and the rows whose grammar allows
no token of the vocabulary (dead ends)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from clika_runtime.engine.output import LiveReply
from clika_runtime.engine.step_plan import StepPlan
from clika_runtime.grammar.masks import MaskedRow, StepMasks


def grammar_masks(plan: StepPlan, live: Mapping[int, LiveReply], vocab_size: int) -> StepMasks:
    """The masks of the plan's constrained sample rows, laid out as the logits rows are."""
    rows: list[MaskedRow] = []
    at = 0
    for row in plan.sample_rows:
        grammar = live[row.seq.request_id].grammar
        if grammar is not None:
            rows.append(MaskedRow(grammar, at, row.draft))
        at += row.num_new if row.draft else 1
    return StepMasks(rows, at, vocab_size)


def dead_ends(plan: StepPlan, dead_logits_rows: Sequence[int], logits: np.ndarray) -> set[int]:
    """The request ids whose grammar allows no token of this vocabulary (their logits rows are
    zeroed so sampling them stays defined; what they pick is dropped)."""
    if not dead_logits_rows:
        return set()
    dead_rows = set(dead_logits_rows)
    dead: set[int] = set()
    at = 0
    for row in plan.sample_rows:
        if at in dead_rows:
            dead.add(row.seq.request_id)
            logits[at : at + (row.num_new if row.draft else 1)] = 0.0
        at += row.num_new if row.draft else 1
    return dead
