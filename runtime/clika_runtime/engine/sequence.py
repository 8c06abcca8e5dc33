"""A request as the engine receives it (``Request``) and its live state (``Sequence``).

Only the scheduler changes a sequence's ``status``; its counts are derived properties.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from clika_runtime.contract.step_graph import RopeSpan
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.prompt_media import PromptMedia
from clika_runtime.forwarded import Forwarded


class SequenceStatus(enum.IntEnum):
    """A sequence's state; every value from FINISHED_STOPPED up means finished."""

    WAITING = 0
    RUNNING = 1
    FINISHED_STOPPED = 2
    FINISHED_LENGTH = 3
    FINISHED_CANCELLED = 4
    FINISHED_ERROR = 5
    FINISHED_GRAMMAR = 6  # the reply's grammar allows no token the model has

    @property
    def finished(self) -> bool:
        return self >= SequenceStatus.FINISHED_STOPPED

    @property
    def finish_reason(self) -> str | None:
        return _FINISH_REASONS.get(self)


_FINISH_REASONS = {
    SequenceStatus.FINISHED_STOPPED: "stop",
    SequenceStatus.FINISHED_LENGTH: "length",
    SequenceStatus.FINISHED_CANCELLED: "cancelled",
    SequenceStatus.FINISHED_ERROR: "error",
    SequenceStatus.FINISHED_GRAMMAR: "grammar",
}


@dataclass(frozen=True)
class Request:
    """What the engine is asked to do: continue ``prompt_ids`` under ``config``.

    ``media``: embeddings for the prompt's media positions (images), None for a text prompt.
    """

    request_id: int
    prompt_ids: tuple[int, ...]
    config: GenerationConfig
    eos_token_ids: frozenset[int] = frozenset()
    arrival_time: float = field(default_factory=time.perf_counter)
    media: PromptMedia | None = None

    @property
    def stop_ids(self) -> frozenset[int]:
        """Token ids that end this request (end-of-sequence unless ignored, plus its stop ids)."""
        ids = set(self.config.stop_token_ids)
        if not self.config.ignore_eos:
            ids |= self.eos_token_ids
        return frozenset(ids)


class Sequence:
    """The live state of one request. Only the scheduler changes ``status``.

    ``token_ids`` holds the prompt then every sampled token;
    ``num_computed_tokens`` counts those whose KV the cache holds and catches up
    with ``len(token_ids)`` step by step (a prompt in chunks, then one token a step).
    """

    __slots__ = (
        "request",
        "token_ids",
        "num_computed_tokens",
        "num_cached_tokens",
        "status",
        "slot",
        "stop_ids",
        "first_scheduled_time",
        "first_token_time",
        "finish_time",
        "error",
        "num_draft_tokens",
        "num_accepted_draft_tokens",
        "draft_limit",
    )

    def __init__(self, request: Request) -> None:
        self.request = request
        self.token_ids: list[int] = list(request.prompt_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        self.status = SequenceStatus.WAITING
        self.slot: int | None = None
        self.stop_ids = request.stop_ids
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.error: str | None = None
        self.num_draft_tokens = 0  # speculative decoding: tokens drafted, and those the model kept
        self.num_accepted_draft_tokens = 0
        # The longest draft worth trying next: it shrinks after refused guesses, grows after kept ones.
        self.draft_limit = request.config.draft_ceiling

    request_id = Forwarded[int]("request")
    config = Forwarded[GenerationConfig]("request")
    media = Forwarded[PromptMedia | None]("request")

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def rope(self) -> RopeSpan | None:
        """Rotary positions off the KV index (M-RoPE models' image prompts), else None."""
        media = self.request.media
        return None if media is None else media.rope

    @property
    def cache_ids(self) -> list[int]:
        """The ids the KV caches compare for prefix reuse: ``token_ids``, each media position's
        id replaced by its image's key id (``prompt_media``). The same list object without media."""
        media = self.request.media
        return self.token_ids if media is None else media.keyed(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.request.prompt_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - len(self.request.prompt_ids)

    @property
    def num_pending_tokens(self) -> int:
        """Tokens whose KV is not computed yet (the rest of the prompt, or the last sampled token)."""
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def completion_ids(self) -> list[int]:
        return self.token_ids[len(self.request.prompt_ids) :]

    @property
    def finished(self) -> bool:
        return self.status >= SequenceStatus.FINISHED_STOPPED

    def __repr__(self) -> str:
        return (
            f"Sequence(id={self.request_id}, status={self.status.name}, slot={self.slot}, "
            f"tokens={self.num_tokens}, computed={self.num_computed_tokens})"
        )
