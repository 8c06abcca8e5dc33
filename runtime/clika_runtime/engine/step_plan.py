"""What one ORT call does: the scheduled rows of a step, in the order their tokens are packed."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from clika_runtime.engine.sequence import Sequence


@dataclass(frozen=True, slots=True)
class ScheduledRow:
    """One sequence's share of a step: ``num_new`` tokens from position ``start``."""

    seq: Sequence
    slot: int
    start: int
    num_new: int
    sample: bool  # True when the chunk reaches the sequence's last token: a new token follows
    # Speculative decoding: guessed tokens run after the pending one (``num_new`` counts both).
    draft: tuple[int, ...] = ()

    @property
    def new_token_ids(self) -> list[int]:
        if self.draft:
            return [self.seq.token_ids[self.start], *self.draft]
        return self.seq.token_ids[self.start : self.start + self.num_new]


@dataclass(frozen=True)
class StepPlan:
    """What one ORT call does: the rows, in the order their tokens are packed."""

    rows: tuple[ScheduledRow, ...]

    # Cached: the executor, the sampler and the scheduler each read them every step.
    @cached_property
    def num_tokens(self) -> int:
        return sum(r.num_new for r in self.rows)

    @cached_property
    def sample_rows(self) -> tuple[ScheduledRow, ...]:
        return tuple(r for r in self.rows if r.sample)

    @cached_property
    def has_drafts(self) -> bool:
        """True when a row runs draft tokens (speculative decoding): it wants every logit of its row."""
        return any(r.draft for r in self.rows)

    @cached_property
    def is_decode(self) -> bool:
        """True when every row runs one token (plain decode: no prompt chunk wider than that)."""
        return all(r.num_new == 1 for r in self.rows)

    @property
    def num_prefill_tokens(self) -> int:
        """Tokens of prompt chunks (rows computing more than the one pending decode token)."""
        return sum(r.num_new for r in self.rows if r.start < r.seq.num_prompt_tokens)


@dataclass(frozen=True, slots=True)
class RowOutput:
    """What a sampling row of a step gave its sequence: ``tokens`` to append, in order.

    A draft row's tokens are the ``accepted`` leading drafts the model confirmed
    plus the model's own pick after them (cut short where the reply ended); a
    plain row's are its one sampled token. ``stop_string``: the reply's text met
    a stop string at the last of them.
    """

    tokens: tuple[int, ...]
    accepted: int = 0
    stop_string: bool = False
