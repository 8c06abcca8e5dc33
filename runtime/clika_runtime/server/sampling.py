"""OpenAI's sampling fields (chat completions, completions, the Responses API) as
:class:`~clika_runtime.engine.config.GenerationConfig` overrides: ``max_tokens`` /
``max_completion_tokens`` -> ``max_new_tokens``, stop strings, the structured-output
constraint; every refusal is a 400 naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clika_runtime.server.errors import bad_request
from clika_runtime.server.protocol import is_int
from clika_runtime.server.structured import openai_constraint

MAX_STOP_STRINGS = 4


# OpenAI name -> GenerationConfig name, for the fields passed through unchanged.
_PASSED = {
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    # Widely used extensions (vLLM, llama.cpp's server).
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "reasoning_effort": "reasoning_effort",
    "ignore_eos": "ignore_eos",
    "prompt_lookup_num_tokens": "prompt_lookup_num_tokens",  # as in Hugging Face's generate
    "num_assistant_tokens": "num_assistant_tokens",  # with a model loaded with an assistant
}


def sampling_options(body: Mapping[str, Any], *token_fields: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name in token_fields:
        if body.get(name) is not None:
            options["max_new_tokens"] = _positive_int(body[name], name)
            break
    if body.get("temperature") is not None and not _number(body["temperature"], 0.0, 2.0):
        raise bad_request(
            f"'temperature' must be a number in [0, 2], got {body['temperature']!r}", "temperature"
        )
    for name, target in _PASSED.items():
        if body.get(name) is not None:
            options[target] = body[name]
    stop = check_stops(body.get("stop"))
    if stop:
        options["stop"] = stop
    constraint = openai_constraint(body)
    if constraint is not None:
        options["response_format"] = constraint
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping) and kwargs.get("enable_thinking") is not None:
        options["enable_thinking"] = kwargs["enable_thinking"]
    return options


def _positive_int(value: Any, name: str) -> int:
    if not is_int(value) or value < 1:
        raise bad_request(f"'{name}' must be an integer >= 1, got {value!r}", name)
    return value


def _number(value: Any, low: float, high: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def check_stops(value: Any, param: str = "stop", most: int | None = MAX_STOP_STRINGS) -> tuple[str, ...]:
    """Stop strings: one non-empty string or an array of them (at most ``most``); a 400 naming ``param``."""
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad_request("'stop' must be a non-empty string or an array of them", param)
    if most is not None and len(stops) > most:
        raise bad_request(f"'stop' takes at most {most} strings, got {len(stops)}", param)
    return tuple(stops)


# GenerationConfig field -> the request field a client wrote (for the 400's ``param``).
REQUEST_FIELD = {"max_new_tokens": "max_tokens", **{v: k for k, v in _PASSED.items()}}
