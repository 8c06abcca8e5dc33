"""Ollama request bodies in (``/api/chat``, ``/api/generate``), the same checked requests out as OpenAI's.

Ollama's option names map onto the engine's sampling fields (``num_predict``
-> ``max_new_tokens``, ``repeat_penalty`` -> ``repetition_penalty`` ...).
Options that only tune Ollama's own runtime (GPU layers, batch size, memory
mapping, threads) change nothing about the reply and are accepted as they
are; ``num_ctx`` is accepted and the model's own window applies. Options
that would change the reply in a way this server cannot honour (mirostat,
``typical_p``, ``tfs_z``, a ``repeat_last_n`` other than the whole context,
a ``format``) are a 400 naming them, never silently ignored. Images ride a
message (``/api/chat``) or the prompt (``/api/generate``) as base64 strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.tools.choice import AUTO, NONE, ToolChoice
from clika_runtime.server.errors import bad_request
from clika_runtime.server.media_parts import image_url_part
from clika_runtime.server.protocol import ChatRequest, check_flag, check_object, check_role, check_tools
from clika_runtime.server.sampling import check_stops
from clika_runtime.server.structured import ollama_constraint

ROLES = ("system", "user", "assistant", "tool")

# Ollama option -> GenerationConfig field.
_SAMPLING = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "seed": "seed",
    "repeat_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
# Ollama's runtime knobs: they change how Ollama runs a model, not what it replies.
_RUNTIME_ONLY = frozenset(
    {
        "num_ctx",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "low_vram",
        "use_mmap",
        "use_mlock",
        "num_thread",
        "numa",
        "vocab_only",
        "embedding_only",
        "num_keep",
        "penalize_newline",
    }
)
# Sampling switches this server does not implement, with the value that means "off".
_OFF = {"mirostat": 0, "typical_p": 1.0, "tfs_z": 1.0}


@dataclass(frozen=True)
class GenerateRequest:
    """A checked ``/api/generate`` body: ``raw`` prompts skip the chat template."""

    model: str
    prompt: str
    system: str | None
    raw: bool
    stream: bool
    options: dict[str, Any]
    max_tokens_given: bool
    think: bool | None
    images: tuple[dict[str, Any], ...] = ()  # image parts of the prompt's user turn


def parse_ollama_chat(body: Any) -> ChatRequest:
    body = check_object(body)
    _refuse_unsupported(body)
    if body.get("images"):
        raise bad_request(
            "/api/chat takes images on a message ('messages[i].images'), not beside them", "images"
        )
    tools = check_tools(body.get("tools"))
    options, given = ollama_options(body.get("options"))
    _add_format(body, options)
    if isinstance(body.get("think"), bool):
        options["enable_thinking"] = body["think"]
    messages = body.get("messages", [])  # none: the client only asks for the model to be loaded
    if not isinstance(messages, list):
        raise bad_request("'messages' must be an array", "messages")
    return ChatRequest(
        model=model_name(body),
        messages=[_message(message, index) for index, message in enumerate(messages)],
        stream=_stream(body),
        tools=tools,
        tool_choice=ToolChoice(AUTO if tools else NONE),
        options=options,
        max_tokens_given=given,
    )


def parse_ollama_generate(body: Any) -> GenerateRequest:
    body = check_object(body)
    _refuse_unsupported(body)
    for name in ("suffix", "template", "context"):
        if body.get(name):
            raise bad_request(f"'{name}' is not supported by this server", name)
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise bad_request("'prompt' must be a string", "prompt")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise bad_request("'system' must be a string", "system")
    options, given = ollama_options(body.get("options"))
    _add_format(body, options)
    think = body.get("think") if isinstance(body.get("think"), bool) else None
    if think is not None:
        options["enable_thinking"] = think
    raw = check_flag(body, "raw", False)
    images = _image_parts(body["images"], "images") if body.get("images") else []
    if images and raw:
        raise bad_request("'images' need the chat template: a 'raw' prompt takes none", "images")
    return GenerateRequest(
        model=model_name(body),
        prompt=prompt,
        system=system,
        raw=raw,
        stream=_stream(body),
        options=options,
        max_tokens_given=given,
        think=think,
        images=tuple(images),
    )


def _add_format(body: Mapping[str, Any], options: dict[str, Any]) -> None:
    constraint = ollama_constraint(body.get("format"))
    if constraint is not None:
        options["response_format"] = constraint


def model_name(body: Mapping[str, Any]) -> str:
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise bad_request("'model' is required: the name of the served model (see /api/tags)", "model")
    return name


def ollama_options(value: Any) -> tuple[dict[str, Any], bool]:
    """GenerationConfig overrides from Ollama's ``options``, and whether ``num_predict`` bounded the reply."""
    if value is None:
        return {}, False
    if not isinstance(value, Mapping):
        raise bad_request("'options' must be an object", "options")
    options: dict[str, Any] = {}
    given = False
    for name, setting in value.items():
        if setting is None or name in _RUNTIME_ONLY:
            continue
        if name in _SAMPLING:
            options[_SAMPLING[name]] = setting
        elif name == "num_predict":
            given = _num_predict(setting, options)
        elif name == "stop":
            options["stop"] = check_stops(setting, "options.stop", most=None)
        elif name == "repeat_last_n":
            if setting != -1:
                raise bad_request(
                    "'repeat_last_n' must be -1 on this server: repeat_penalty covers the whole context",
                    "options.repeat_last_n",
                )
        elif name in _OFF:
            if setting != _OFF[name]:
                raise bad_request(f"'{name}' is not supported by this server", f"options.{name}")
        else:
            raise bad_request(f"'{name}' is not an option this server knows", f"options.{name}")
    return options, given


def _num_predict(setting: Any, options: dict[str, Any]) -> bool:
    if not isinstance(setting, int) or isinstance(setting, bool) or setting == 0 or setting < -2:
        raise bad_request(
            f"'num_predict' must be a positive integer, -1 or -2, got {setting!r}", "options.num_predict"
        )
    if setting < 0:  # Ollama: until the context fills; here until the server's reply bound
        return False
    options["max_new_tokens"] = setting
    return True


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    if body.get("logprobs"):
        raise bad_request("'logprobs' are not supported by this server", "logprobs")


def _stream(body: Mapping[str, Any]) -> bool:
    return check_flag(body, "stream", True)  # Ollama streams unless told not to


def _image_parts(images: Any, param: str) -> list[dict[str, Any]]:
    """A message's ``images`` (base64 strings) as the image parts the backend reads."""
    if not isinstance(images, list) or not all(isinstance(image, str) and image for image in images):
        raise bad_request(f"{param} must be an array of base64-encoded images", param)
    return [image_url_part(f"data:image;base64,{image}", f"{param}[{j}]") for j, image in enumerate(images)]


def _message(message: Any, index: int) -> dict[str, Any]:
    """An Ollama message as the chat layer's turn (tool calls with ids, tool results named)."""
    param = f"messages[{index}]"
    role = check_role(message, param, ROLES)
    content = message.get("content", "")
    if not isinstance(content, str):
        raise bad_request(f"{param}.content must be a string", f"{param}.content")
    turn: dict[str, Any] = {"role": role, "content": content}
    if message.get("images"):
        turn["content"] = [
            *_image_parts(message["images"], f"{param}.images"),
            {"type": "text", "text": content},
        ]
    if isinstance(message.get("thinking"), str):
        turn["reasoning_content"] = message["thinking"]
    if role == "tool":
        name = message.get("tool_name") or message.get("name")
        if name is not None:
            turn["name"] = name
        turn["tool_call_id"] = message.get("tool_call_id") or f"call_{index}"
    calls = message.get("tool_calls")
    if calls and not isinstance(calls, list):
        raise bad_request(f"{param}.tool_calls must be a list of calls", f"{param}.tool_calls")
    if calls:
        turn["tool_calls"] = [
            _call(call, f"{param}.tool_calls[{i}]", index, i) for i, call in enumerate(calls)
        ]
    return turn


def _call(call: Any, param: str, turn: int, index: int) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise bad_request(f"{param} must be {{'function': {{'name': ..., 'arguments': {{...}}}}}}", param)
    arguments = function.get("arguments", {})
    if not isinstance(arguments, dict):
        raise bad_request(f"{param}.function.arguments must be an object", f"{param}.function.arguments")
    ident = call.get("id") or f"call_{turn}_{index}"
    return {"id": ident, "type": "function", "function": {"name": function["name"], "arguments": arguments}}
