"""Embedding request bodies in: OpenAI's ``/v1/embeddings``, Ollama's ``/api/embed`` and ``/api/embeddings``.

OpenAI's ``input`` is a string, a list of strings, a list of token ids or a
list of token-id lists (at most ``MAX_INPUTS``); ``encoding_format`` is
"float" or "base64"; ``dimensions`` cuts the vectors. Ollama's ``input`` is a
string or a list of strings (empty: no vectors, as Ollama answers),
``truncate`` (default true) cuts inputs to the context window; the legacy
route takes one ``prompt``. Every refusal is a 400 naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clika_runtime.server.errors import bad_request
from clika_runtime.server.ollama.protocol import model_name

MAX_INPUTS = 2048  # OpenAI's limit per request
ENCODING_FORMATS = ("float", "base64")


@dataclass(frozen=True)
class EmbeddingRequest:
    model: str
    inputs: list[str | list[int]]
    dimensions: int | None = None
    encoding_format: str = "float"
    truncate: bool = False


def parse_openai_embeddings(body: Any) -> EmbeddingRequest:
    body = _object(body)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required: the id of the served model (see /v1/models)", "model")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODING_FORMATS:
        raise bad_request(
            f"'encoding_format' must be one of {', '.join(ENCODING_FORMATS)}, got {encoding!r}",
            "encoding_format",
        )
    return EmbeddingRequest(
        model=model,
        inputs=_openai_inputs(body.get("input")),
        dimensions=_dimensions(body),
        encoding_format=encoding,
    )


def parse_ollama_embed(body: Any) -> EmbeddingRequest:
    body = _object(body)
    value = body.get("input")
    if value is None or isinstance(value, str):
        inputs: list[str | list[int]] = [value] if value else []
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        inputs = list(value)
    else:
        raise bad_request("'input' must be a string or a list of strings", "input")
    if any(not item for item in inputs):
        raise bad_request(f"'input' item {inputs.index('')} is an empty string", "input")
    _check_count(inputs)
    truncate = body.get("truncate", True)
    if not isinstance(truncate, bool):
        raise bad_request("'truncate' must be true or false", "truncate")
    return EmbeddingRequest(
        model=model_name(body), inputs=inputs, dimensions=_dimensions(body), truncate=truncate
    )


def parse_ollama_embeddings(body: Any) -> EmbeddingRequest:
    """The legacy route: one ``prompt`` (empty: no vector), cut to the context window."""
    body = _object(body)
    prompt = body.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise bad_request("'prompt' must be a string", "prompt")
    return EmbeddingRequest(model=model_name(body), inputs=[prompt] if prompt else [], truncate=True)


def _openai_inputs(value: Any) -> list[str | list[int]]:
    if isinstance(value, str):
        inputs: list[str | list[int]] = [value]
    elif isinstance(value, list) and value and all(_is_token(item) for item in value):
        inputs = [list(value)]  # one input given as its token ids
    elif isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        inputs = list(value)
    elif isinstance(value, list) and value and all(_is_token_list(item) for item in value):
        inputs = [list(item) for item in value]
    elif value is None:
        raise bad_request("'input' is required: a string, a list of strings or of token ids", "input")
    elif isinstance(value, list) and not value:
        raise bad_request("'input' is an empty list: give at least one string or token list", "input")
    else:
        raise bad_request(
            "'input' must be a string, a list of strings, a list of token ids or a list of token-id lists "
            "(not a mix)",
            "input",
        )
    for index, item in enumerate(inputs):
        if not item:
            raise bad_request(f"'input' item {index} is empty", "input")
    _check_count(inputs)
    return inputs


def _check_count(inputs: list[Any]) -> None:
    if len(inputs) > MAX_INPUTS:
        raise bad_request(f"'input' has {len(inputs)} items; at most {MAX_INPUTS} a request", "input")


def _dimensions(body: Mapping[str, Any]) -> int | None:
    value = body.get("dimensions")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(f"'dimensions' must be a positive integer, got {value!r}", "dimensions")
    return value


def _is_token(item: Any) -> bool:
    return isinstance(item, int) and not isinstance(item, bool)


def _is_token_list(item: Any) -> bool:
    return isinstance(item, list) and all(_is_token(token) for token in item)


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body
