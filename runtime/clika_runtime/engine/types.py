"""The engine's vocabulary: decode policy, requests, live sequences, step plans, reports.

``GenerationConfig`` is the decode policy a request carries (frozen, validated at
construction so a bad value fails at the edge, naming the field). ``Request`` is
the immutable input the engine receives; ``Sequence`` is the live state the
scheduler alone advances; ``StepPlan`` is what one ORT call does;
``GenerationReport`` / ``ChatOutcome`` say how a reply ended; ``StageEvent`` is
what a stage observer receives.
"""

from __future__ import annotations

import enum
import math
import numbers
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clika_runtime.chat.tools import ToolCall


class QueueFullError(RuntimeError):
    """The engine's waiting queue is full; the request was not accepted (nothing else changed)."""


class EngineClosedError(RuntimeError):
    """The engine was closed; it takes no more requests."""


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


@dataclass(frozen=True)
class GenerationConfig:
    """The decode policy of one request.

    ``temperature=0`` decodes greedily. ``top_k=0``, ``top_p=1`` and ``min_p=0``
    switch those filters off; ``repetition_penalty=1`` and the presence /
    frequency penalties at 0 switch penalties off. ``seed`` makes sampling
    reproducible: the same seed gives the same text alone and in a batch.
    ``stop`` strings end the reply and are never shown; ``stop_token_ids`` end
    it like the end-of-sequence ids do. ``prompt_lookup_num_tokens`` > 0 lets
    a greedy request without penalties draft up to that many tokens a step from
    its own history (speculative decoding: the greedy reply, up to the kernels'
    rounding, in fewer steps when the text repeats itself); other requests
    decode as usual. ``num_assistant_tokens`` > 0 drafts with the model's
    assistant model instead (assisted generation; needs one attached).
    """

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    prompt_lookup_num_tokens: int = 0
    num_assistant_tokens: int = 0
    # Read by the chat layer (template rendering); the engine ignores them.
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        for check in _CHECKS:
            check(self)

    @property
    def greedy(self) -> bool:
        """True when decoding picks the most likely token (no randomness)."""
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @property
    def draft_ceiling(self) -> int:
        """The most tokens a step may draft: the assistant's share when asked for, else prompt lookup's."""
        return self.num_assistant_tokens or self.prompt_lookup_num_tokens

    @cached_property
    def stateless(self) -> bool:
        """Greedy without penalties: picking a token needs no per-request state (read every step)."""
        return self.greedy and not self.has_penalties

    def overlay(self, overrides: Mapping[str, Any]) -> GenerationConfig:
        """A copy with ``overrides`` applied; an unknown name is a ValueError naming it."""
        if not overrides:
            return self
        unknown = sorted(set(overrides) - CONFIG_FIELDS)
        if unknown:
            raise ValueError(
                f"unknown generation option(s) {', '.join(map(repr, unknown))}; "
                f"known options: {', '.join(sorted(CONFIG_FIELDS))}"
            )
        return replace(self, **dict(overrides))

    @classmethod
    def resolve(
        cls,
        defaults: GenerationConfig,
        config: GenerationConfig | Mapping[str, Any] | None,
        overrides: Mapping[str, Any],
    ) -> GenerationConfig:
        """``defaults``, then ``config`` (a GenerationConfig replaces them, a mapping overlays), then ``overrides``."""
        if isinstance(config, GenerationConfig):
            base = config
        elif config is None:
            base = defaults
        elif isinstance(config, Mapping):
            base = defaults.overlay(config)
        else:
            raise ValueError(f"config must be a GenerationConfig or a mapping, not {type(config).__name__}")
        return base.overlay(overrides)


CONFIG_FIELDS = frozenset(f.name for f in fields(GenerationConfig))


def _check_max_new_tokens(c: GenerationConfig) -> None:
    if not _is_int(c.max_new_tokens) or c.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {c.max_new_tokens!r}")


def _check_temperature(c: GenerationConfig) -> None:
    if not _is_real(c.temperature) or c.temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {c.temperature!r}")


def _check_top_p(c: GenerationConfig) -> None:
    if not _is_real(c.top_p) or not 0.0 < c.top_p <= 1.0:
        raise ValueError(f"top_p must be a number in (0, 1], got {c.top_p!r}")


def _check_top_k(c: GenerationConfig) -> None:
    if not _is_int(c.top_k) or c.top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {c.top_k!r}")


def _check_min_p(c: GenerationConfig) -> None:
    if not _is_real(c.min_p) or not 0.0 <= c.min_p <= 1.0:
        raise ValueError(f"min_p must be a number in [0, 1], got {c.min_p!r}")


def _check_penalties(c: GenerationConfig) -> None:
    if not _is_real(c.repetition_penalty) or c.repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty must be a finite number > 0, got {c.repetition_penalty!r}")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(c, name)
        if not _is_real(value) or not -2.0 <= value <= 2.0:
            raise ValueError(f"{name} must be a number in [-2, 2], got {value!r}")


def _check_seed(c: GenerationConfig) -> None:
    if c.seed is not None and (not _is_int(c.seed) or c.seed < 0):
        raise ValueError(f"seed must be an integer >= 0 or None, got {c.seed!r}")


def _check_stops(c: GenerationConfig) -> None:
    for s in c.stop:
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop must hold non-empty strings, got {s!r}")
    for t in c.stop_token_ids:
        if not _is_int(t) or t < 0:
            raise ValueError(f"stop_token_ids must hold token ids >= 0, got {t!r}")


def _check_flags(c: GenerationConfig) -> None:
    if not isinstance(c.ignore_eos, bool):
        raise ValueError(f"ignore_eos must be True or False, got {c.ignore_eos!r}")
    if c.enable_thinking is not None and not isinstance(c.enable_thinking, bool):
        raise ValueError(f"enable_thinking must be True, False or None, got {c.enable_thinking!r}")
    if c.reasoning_effort is not None and not isinstance(c.reasoning_effort, str):
        raise ValueError(f"reasoning_effort must be a string or None, got {c.reasoning_effort!r}")


# More drafted tokens than this only make rejected steps wider.
MAX_DRAFT_TOKENS = 64


def _check_drafting(c: GenerationConfig) -> None:
    for name in ("prompt_lookup_num_tokens", "num_assistant_tokens"):
        n = getattr(c, name)
        if not _is_int(n) or not 0 <= n <= MAX_DRAFT_TOKENS:
            raise ValueError(f"{name} must be an integer in 0..{MAX_DRAFT_TOKENS} (0 = off), got {n!r}")


_CHECKS: tuple[Callable[[GenerationConfig], None], ...] = (
    _check_max_new_tokens,
    _check_temperature,
    _check_top_p,
    _check_top_k,
    _check_min_p,
    _check_penalties,
    _check_seed,
    _check_stops,
    _check_flags,
    _check_drafting,
)


def config_from_checkpoint(defaults: Mapping[str, Any]) -> GenerationConfig:
    """The decode defaults a checkpoint ships, read the way Hugging Face reads them.

    ``do_sample: false`` (or absent with no temperature) means greedy; known
    sampling keys carry over; keys this runtime has no use for are ignored.
    """
    values: dict[str, Any] = {}
    for key in ("max_new_tokens", "top_p", "top_k", "min_p", "repetition_penalty", "seed"):
        if defaults.get(key) is not None:
            values[key] = defaults[key]
    sample = defaults.get("do_sample")
    temperature = defaults.get("temperature")
    if temperature is not None and sample is not False:
        values["temperature"] = float(temperature)
    elif sample is True:
        values["temperature"] = 1.0
    if "top_p" in values:
        values["top_p"] = float(values["top_p"])
    return GenerationConfig(**values)


class SequenceStatus(enum.IntEnum):
    """A sequence's state; every value from FINISHED_STOPPED up means finished."""

    WAITING = 0
    RUNNING = 1
    FINISHED_STOPPED = 2
    FINISHED_LENGTH = 3
    FINISHED_CANCELLED = 4
    FINISHED_ERROR = 5

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
}


@dataclass(frozen=True)
class Request:
    """What the engine is asked to do: continue ``prompt_ids`` under ``config``."""

    request_id: int
    prompt_ids: tuple[int, ...]
    config: GenerationConfig
    eos_token_ids: frozenset[int] = frozenset()
    arrival_time: float = field(default_factory=time.perf_counter)

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

    @property
    def request_id(self) -> int:
        return self.request.request_id

    @property
    def config(self) -> GenerationConfig:
        return self.request.config

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

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

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def finish(self) -> str:
        """The finish reason (the name ``ChatOutcome`` uses)."""
        return self.finish_reason


@dataclass(frozen=True)
class ChatOutcome:
    """How one chat reply ended: its text, reasoning, tool calls and the engine's report.

    ``finish`` is "tool_calls" when the reply called tools, else the report's
    finish reason.
    """

    text: str
    report: GenerationReport
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()  # clika_runtime.chat.tools.ToolCall

    @property
    def finish(self) -> str:
        return "tool_calls" if self.tool_calls else self.report.finish_reason

    @property
    def finish_reason(self) -> str:
        return self.finish

    @property
    def prompt_tokens(self) -> int:
        return self.report.prompt_tokens

    @property
    def completion_tokens(self) -> int:
        return self.report.completion_tokens

    @property
    def cached_tokens(self) -> int:
        return self.report.cached_tokens

    @property
    def time_to_first_token_s(self) -> float | None:
        return self.report.time_to_first_token_s

    @property
    def decode_tokens_per_s(self) -> float | None:
        return self.report.decode_tokens_per_s

    @property
    def draft_tokens(self) -> int:
        return self.report.draft_tokens

    @property
    def accepted_draft_tokens(self) -> int:
        return self.report.accepted_draft_tokens


@dataclass(frozen=True)
class StageEvent:
    """One pipeline stage of one request, as a stage observer sees it.

    ``stage`` is "tokenize", "prefill" (admission to first token), "decode"
    (first token to the end), "detokenize" (``text`` holds the final text) or
    "step" (one engine step, ``request_id`` None; ``detail`` splits its time
    into ``model_s`` inside ONNX Runtime and ``host_s`` in Python).
    """

    stage: str
    request_id: int | None
    seconds: float
    tokens: int = 0
    text: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


StageObserver = Callable[[StageEvent], None]
