"""How one reply ended: ``GenerationReport``, its finish reason, token counts and timings."""

from __future__ import annotations

from dataclasses import dataclass

from clika_runtime.engine.logprobs import TokenLogprob


@dataclass(frozen=True)
class GenerationReport:
    """How one reply ended, with its token counts and timings.

    ``finish_reason`` is "stop" (an end-of-sequence id, a stop id or a stop
    string), "length" (``max_new_tokens`` or the context window), "cancelled"
    or "error". ``cached_tokens`` counts prompt tokens whose KV was reused
    instead of computed. ``time_to_first_token_s`` runs from submission to the
    first sampled token; ``decode_tokens_per_s`` covers the tokens after it.
    ``draft_tokens`` / ``accepted_draft_tokens``: the speculative decoding
    tally (tokens drafted by prompt lookup, and those the model confirmed).
    ``logprobs``: each new token's log-probability and alternatives, when the
    request asked for them (``GenerationConfig.logprobs``).
    """

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    time_to_first_token_s: float | None = None
    decode_tokens_per_s: float | None = None
    total_s: float = 0.0
    queue_s: float = 0.0
    stop_string: str | None = None
    error: str | None = None
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    logprobs: tuple[TokenLogprob, ...] = ()

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def finish(self) -> str:
        """The finish reason (the name ``ChatOutcome`` uses)."""
        return self.finish_reason
