"""Draft tokens from an assistant model: a smaller model of the same vocabulary guesses ahead.

A ``clika_runtime.engine.spec_decode.drafting.Drafter``: the target engine asks it before
scheduling a step, never from inside the scheduler.

The assistant runs its own engine (its own KV cache and thread). Each step
that drafts hands it every drafting sequence's whole history at once and
waits for its greedy continuations; its continuous cache finds each history's
previous call in a freed slot (prefix reuse), so a call computes only the
tokens added since, then the draft. The target engine then checks the draft
exactly as it checks a prompt-lookup one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.sequence import Sequence as Seq

# Drafts a step where nobody asked for a number (the CLI, a served model): drafts adapt
# to what the model keeps; 4 did best with Qwen2.5-Coder 0.5B drafting for 1.5B.
DEFAULT_ASSISTANT_TOKENS = 4

if TYPE_CHECKING:
    from clika_runtime.engine.engine import Engine


class AssistantDrafter:
    """Greedy drafts from an assistant model's engine, one call for all the step's sequences."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def propose(self, seqs: Sequence[Seq], limits: Sequence[int]) -> list[list[int]]:
        """For each sequence's history, up to its limit of tokens the assistant would pick next (greedy).

        A history the assistant cannot take (its queue full, its context too short)
        gets no draft: the sequence then decodes one token, as without an assistant.
        """
        streams = []
        for seq, limit in zip(seqs, limits, strict=True):
            try:
                config = GenerationConfig(max_new_tokens=limit, ignore_eos=True)
                streams.append(self.engine.submit(list(seq.token_ids), config, detokenize=False))
            except (ValueError, RuntimeError):  # QueueFullError and EngineClosedError are RuntimeErrors
                streams.append(None)
        return [[] if s is None else [t for delta in s for t in delta.token_ids] for s in streams]

    def close(self) -> None:
        self.engine.close()
