"""Speculative drafts behind one protocol: the engine asks its drafters before each schedule.

A ``Drafter`` guesses the tokens that follow each of a step's decoding
sequences; the scheduler then runs each sequence's pending token plus its
draft in one row, and ``Scheduler.update`` rolls back what the model's own
greedy picks refuse (one path for accepted and rejected drafts). The policy
lives here, beside the drafters: how long a sequence may guess
(``draft_limit``), how many guesses the model confirmed (``confirmed_drafts``)
and how the next guess is sized from that (``record_draft``); the scheduler
only shares the step's spare budget among the guesses. Two drafters exist:
``PromptLookupDrafter`` (the sequence's own history) and
``clika_runtime.engine.spec_decode.assistant.AssistantDrafter`` (a smaller model); a
request's config names which one drafts for it.
"""

from __future__ import annotations

from collections.abc import Sequence as Seqs
from typing import Protocol

from clika_runtime.engine.sequence import Sequence
from clika_runtime.engine.spec_decode.prompt_lookup import propose_draft

PROMPT_LOOKUP = "prompt_lookup"
ASSISTANT = "assistant"


class Drafter(Protocol):
    """Guesses continuations: for each sequence, up to its limit of tokens (fewer, or none, is fine)."""

    def propose(self, seqs: Seqs[Sequence], limits: Seqs[int]) -> list[list[int]]: ...

    def close(self) -> None: ...


class PromptLookupDrafter:
    """Drafts looked up in each sequence's own history (``clika_runtime.engine.spec_decode.prompt_lookup``)."""

    def propose(self, seqs: Seqs[Sequence], limits: Seqs[int]) -> list[list[int]]:
        return [propose_draft(seq.token_ids, limit) for seq, limit in zip(seqs, limits, strict=True)]

    def close(self) -> None:
        pass


def drafter_name(seq: Sequence) -> str:
    """Which drafter drafts for ``seq``: the assistant when its request asks for one, else prompt lookup."""
    return ASSISTANT if seq.config.num_assistant_tokens else PROMPT_LOOKUP


def propose_drafts(
    drafters: dict[str, Drafter], wanted: Seqs[tuple[Sequence, int]]
) -> dict[int, tuple[int, ...]]:
    """Each wanting sequence's draft by request id, one ``propose`` call per drafter."""
    groups: dict[str, list[tuple[Sequence, int]]] = {}
    for seq, limit in wanted:
        groups.setdefault(drafter_name(seq), []).append((seq, limit))
    drafts: dict[int, tuple[int, ...]] = {}
    for name, group in groups.items():
        drafter = drafters.get(name)
        if drafter is None:
            continue
        proposed = drafter.propose([s for s, _ in group], [n for _, n in group])
        for (seq, limit), tokens in zip(group, proposed, strict=True):
            if tokens:
                drafts[seq.request_id] = tuple(tokens[:limit])
    return drafts


def draft_limit(seq: Sequence, max_seq: int) -> int:
    """How many tokens ``seq`` may guess now: greedy, no penalties, room left in the reply."""
    if not seq.config.draft_ceiling or not seq.config.stateless:
        return 0
    return min(
        seq.draft_limit,
        seq.config.max_new_tokens - seq.num_completion_tokens - 1,  # the model's own pick follows
        max_seq - seq.num_tokens,  # the last drafted position stays inside the context
    )


def confirmed_drafts(draft: tuple[int, ...], picked: list[int]) -> int:
    """How many leading draft tokens equal the model's picks before them."""
    count = 0
    while count < len(draft) and picked[count] == draft[count]:
        count += 1
    return count


def record_draft(seq: Sequence, drafted: int, accepted: int) -> None:
    """Tally a draft of ``drafted`` tokens that kept ``accepted``, and size the next one."""
    seq.num_draft_tokens += drafted
    seq.num_accepted_draft_tokens += accepted
    seq.draft_limit = next_draft_limit(seq.config.draft_ceiling, drafted, accepted)


def next_draft_limit(ceiling: int, drafted: int, accepted: int) -> int:
    """The longest draft worth trying after one of ``drafted`` tokens that kept ``accepted``.

    Twice as long after a wholly kept draft (up to ``ceiling``), else what was
    kept plus one: a refused guess costs a wider step for nothing (SmolLM2 int4
    decoded an open question 17% slower with fixed 8-token drafts, 3% faster so).
    """
    return min(ceiling, 2 * drafted) if accepted == drafted else accepted + 1
