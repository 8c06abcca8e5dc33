"""The decode policy of one request: ``GenerationConfig``, frozen and validated at construction.

A bad value fails at the edge, naming the field; ``config_from_checkpoint``
reads a checkpoint's shipped defaults the way Hugging Face reads them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

from clika_runtime.engine.errors import TurnError, as_turn_error
from clika_runtime.grammar.constraint import Constraint, GrammarError, constraint_from


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
    reproducible: the same seed gives the same draws whatever else runs, and
    the same text for the same prompt and batching, a cached prefix or not
    (``clika_runtime.engine.sampler`` says where the rounding of other
    batching can change sampled text).
    ``stop`` strings end the reply and are never shown; ``stop_token_ids`` end
    it like the end-of-sequence ids do. ``prompt_lookup_num_tokens`` > 0 lets
    a greedy request without penalties draft up to that many tokens a step from
    its own history (speculative decoding: the greedy reply, up to the kernels'
    rounding, in fewer steps when the text repeats itself); other requests
    decode as usual. ``num_assistant_tokens`` > 0 drafts with the model's
    assistant model instead (assisted generation; needs one attached).
    ``response_format`` holds the reply to a JSON schema, JSON, a regex or a
    grammar (anything :func:`clika_runtime.grammar.constraint_from` takes;
    stored compiled, as a :class:`~clika_runtime.grammar.Constraint`).
    ``logprobs`` (None: off) reports each new token's log-probability under
    the model's own distribution, with that many most likely alternatives
    (0 to ``MAX_LOGPROBS``); a request asking for them decodes without drafts.
    ``tool_choice`` (a chat turn offered tools: "auto", "none", "required" or a
    function, see :mod:`clika_runtime.chat.tools.choice`) and
    ``parallel_tool_calls`` are read by the chat layer, which holds a required
    call to the offered tools' schemas with a grammar.
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
    response_format: Any = None
    logprobs: int | None = None
    # Read by the chat layer (template rendering, tool calls); the engine ignores them.
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if self.response_format is not None and not isinstance(self.response_format, Constraint):
            try:
                object.__setattr__(self, "response_format", constraint_from(self.response_format))
            except GrammarError as exc:
                raise as_turn_error(exc, field="response_format") from exc
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
            raise TurnError(
                f"unknown generation option(s) {', '.join(map(repr, unknown))}; "
                f"known options: {', '.join(sorted(CONFIG_FIELDS))}",
                field=unknown[0],
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
        raise TurnError(
            f"max_new_tokens must be an integer >= 1, got {c.max_new_tokens!r}", field="max_new_tokens"
        )


def _check_temperature(c: GenerationConfig) -> None:
    if not _is_real(c.temperature) or c.temperature < 0:
        raise TurnError(
            f"temperature must be a finite number >= 0, got {c.temperature!r}", field="temperature"
        )


def _check_top_p(c: GenerationConfig) -> None:
    if not _is_real(c.top_p) or not 0.0 < c.top_p <= 1.0:
        raise TurnError(f"top_p must be a number in (0, 1], got {c.top_p!r}", field="top_p")


def _check_top_k(c: GenerationConfig) -> None:
    if not _is_int(c.top_k) or c.top_k < 0:
        raise TurnError(f"top_k must be an integer >= 0 (0 = off), got {c.top_k!r}", field="top_k")


def _check_min_p(c: GenerationConfig) -> None:
    if not _is_real(c.min_p) or not 0.0 <= c.min_p <= 1.0:
        raise TurnError(f"min_p must be a number in [0, 1], got {c.min_p!r}", field="min_p")


def _check_penalties(c: GenerationConfig) -> None:
    if not _is_real(c.repetition_penalty) or c.repetition_penalty <= 0:
        raise TurnError(
            f"repetition_penalty must be a finite number > 0, got {c.repetition_penalty!r}",
            field="repetition_penalty",
        )
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(c, name)
        if not _is_real(value) or not -2.0 <= value <= 2.0:
            raise TurnError(f"{name} must be a number in [-2, 2], got {value!r}", field=name)


def _check_logprobs(c: GenerationConfig) -> None:
    if c.logprobs is not None and (not _is_int(c.logprobs) or not 0 <= c.logprobs <= MAX_LOGPROBS):
        raise TurnError(
            f"logprobs must be an integer in 0..{MAX_LOGPROBS} or None, got {c.logprobs!r}", field="logprobs"
        )


def _check_seed(c: GenerationConfig) -> None:
    if c.seed is not None and (not _is_int(c.seed) or c.seed < 0):
        raise TurnError(f"seed must be an integer >= 0 or None, got {c.seed!r}", field="seed")


def _check_stops(c: GenerationConfig) -> None:
    for s in c.stop:
        if not isinstance(s, str) or not s:
            raise TurnError(f"stop must hold non-empty strings, got {s!r}", field="stop")
    for t in c.stop_token_ids:
        if not _is_int(t) or t < 0:
            raise TurnError(f"stop_token_ids must hold token ids >= 0, got {t!r}", field="stop_token_ids")


def _check_flags(c: GenerationConfig) -> None:
    if not isinstance(c.ignore_eos, bool):
        raise TurnError(f"ignore_eos must be True or False, got {c.ignore_eos!r}", field="ignore_eos")
    if c.enable_thinking is not None and not isinstance(c.enable_thinking, bool):
        raise TurnError(
            f"enable_thinking must be True, False or None, got {c.enable_thinking!r}", field="enable_thinking"
        )
    if c.reasoning_effort is not None and not isinstance(c.reasoning_effort, str):
        raise TurnError(
            f"reasoning_effort must be a string or None, got {c.reasoning_effort!r}", field="reasoning_effort"
        )
    if not isinstance(c.parallel_tool_calls, bool):
        raise TurnError(
            f"parallel_tool_calls must be True or False, got {c.parallel_tool_calls!r}",
            field="parallel_tool_calls",
        )
    if c.tool_choice is not None and not isinstance(c.tool_choice, (str, Mapping)):
        raise TurnError(
            f"tool_choice must be 'auto', 'none', 'required', a function name or a mapping, got {c.tool_choice!r}",
            field="tool_choice",
        )


# More drafted tokens than this only make rejected steps wider.
MAX_DRAFT_TOKENS = 64
MAX_LOGPROBS = 20  # alternatives a token's log-probability comes with, at most (as OpenAI)


def _check_drafting(c: GenerationConfig) -> None:
    for name in ("prompt_lookup_num_tokens", "num_assistant_tokens"):
        n = getattr(c, name)
        if not _is_int(n) or not 0 <= n <= MAX_DRAFT_TOKENS:
            raise TurnError(
                f"{name} must be an integer in 0..{MAX_DRAFT_TOKENS} (0 = off), got {n!r}", field=name
            )


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
    _check_logprobs,
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
