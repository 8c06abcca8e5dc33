"""Speculative drafts behind one protocol: the engine asks its drafters before each schedule.

A ``Drafter`` guesses the tokens that follow each of a step's decoding
sequences; the scheduler then runs each sequence's pending token plus its
draft in one row, and ``Scheduler.update`` keeps what the model's own greedy
picks confirm (one path for accepted and rejected drafts). Two drafters exist:
``PromptLookupDrafter`` (the sequence's own history) and
``clika_runtime.engine.assistant.AssistantDrafter`` (a smaller model); a
request's config names which one drafts for it.
"""

from __future__ import annotations

from collections.abc import Sequence as Seqs
from typing import Protocol

from clika_runtime.engine.prompt_lookup import propose_draft
from clika_runtime.engine.sequence import Sequence

PROMPT_LOOKUP = "prompt_lookup"
ASSISTANT = "assistant"


class Drafter(Protocol):
    """Guesses continuations: for each sequence, up to its limit of tokens (fewer, or none, is fine)."""

    def propose(self, seqs: Seqs[Sequence], limits: Seqs[int]) -> list[list[int]]: ...

    def close(self) -> None: ...


class PromptLookupDrafter:
    """Drafts looked up in each sequence's own history (``clika_runtime.engine.prompt_lookup``)."""

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
