"""Ollama's API on the same server and engine: ``/api/chat``, ``/api/generate``, ``/api/tags``,
``/api/show``, ``/api/ps``, ``/api/version`` (``/api/embed`` and ``/api/embeddings``: see
:mod:`~clika_runtime.server.embeddings_routes`).

Replies stream as NDJSON unless ``"stream": false``; errors are Ollama's
``{"error": "..."}`` with the HTTP status. The served model answers to its id
and to the id with Ollama's default tag (``name:latest``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from clika_runtime.server.backend import Finished, ReplyRun
from clika_runtime.server.bridge import run_events
from clika_runtime.server.errors import ApiError
from clika_runtime.server.ollama_protocol import (
    GenerateRequest,
    model_name,
    parse_ollama_chat,
    parse_ollama_generate,
)
from clika_runtime.server.ollama_shapes import (
    MEDIA_TYPE,
    chat_line,
    chat_response,
    created_at,
    generate_line,
    generate_response,
    loaded,
    ndjson,
)
from clika_runtime.server.protocol import ChatRequest
from clika_runtime.server.served import Served
from clika_runtime.server.streaming import SHUTDOWN_MESSAGE, EventStream, gather, guarded

# The Ollama API version these routes follow (clients read it to pick features).
OLLAMA_API_VERSION = "0.12.0"
DEFAULT_TAG = ":latest"


def ollama_routes(served: Served) -> list[Route]:
    handlers = _Ollama(served)
    return [
        Route("/api/chat", handlers.chat, methods=["POST"]),
        Route("/api/generate", handlers.generate, methods=["POST"]),
        Route("/api/tags", handlers.tags, methods=["GET"]),
        Route("/api/show", handlers.show, methods=["POST"]),
        Route("/api/ps", handlers.ps, methods=["GET"]),
        Route("/api/version", handlers.version, methods=["GET"]),
    ]


def ndjson_failure(message: str) -> bytes:
    return ndjson({"error": message})


def ndjson_farewell() -> bytes:
    return ndjson({"error": SHUTDOWN_MESSAGE})


class _Ollama:
    def __init__(self, served: Served) -> None:
        self.served = served
        self.backend = served.backend

    # -- generation ----------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        parsed = await self.served.prepare(parse_ollama_chat, await self.served.intake.json(request))
        name = self._check_model(parsed.model)
        if not parsed.messages:
            return JSONResponse({**loaded(name), "message": {"role": "assistant", "content": ""}})
        run = await self.served.prepare(self.backend.start_chat, parsed)
        if parsed.stream:
            return self._stream(_lines(self.served, run, lambda e: chat_line(name, e)), run, request)
        [reply] = await gather([run], request, self.served.closing, self.served.metrics.record_reply)
        return JSONResponse(chat_response(name, reply))

    async def generate(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        parsed = await self.served.prepare(parse_ollama_generate, await self.served.intake.json(request))
        name = self._check_model(parsed.model)
        if not parsed.prompt and not parsed.images:
            return JSONResponse({**loaded(name), "response": ""})
        run = await self.served.prepare(self._start_generate, parsed)
        if parsed.stream:
            return self._stream(_lines(self.served, run, lambda e: generate_line(name, e)), run, request)
        [reply] = await gather([run], request, self.served.closing, self.served.metrics.record_reply)
        return JSONResponse(generate_response(name, reply))

    def _start_generate(self, parsed: GenerateRequest) -> ReplyRun:
        if parsed.raw:  # the prompt is the model's text as it is: no template
            return self.backend.start_completion(parsed.prompt, parsed.options, parsed.max_tokens_given)
        messages = [{"role": "system", "content": parsed.system}] if parsed.system else []
        content: str | list[dict[str, Any]] = parsed.prompt
        if parsed.images:  # the images before the text, as generate(images=) puts them
            content = [*parsed.images, {"type": "text", "text": parsed.prompt}]
        messages.append({"role": "user", "content": content})
        chat = ChatRequest(
            model=parsed.model,
            messages=messages,
            options=parsed.options,
            max_tokens_given=parsed.max_tokens_given,
        )
        return self.backend.start_chat(chat)

    def _stream(self, lines: AsyncIterator[bytes], run: ReplyRun, request: Request) -> Response:
        where = f"{request.method} {request.url.path}"
        return EventStream(
            guarded(lines, where, ndjson_failure),
            run.cancel,
            self.served.closing,
            ndjson_farewell,
            MEDIA_TYPE,
        )

    # -- the model -------------------------------------------------------------------------------

    async def tags(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        return JSONResponse({"models": [self._entry]})

    async def ps(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        entry = {
            **self._entry,
            "name": self._name,
            "expires_at": "2318-01-01T00:00:00Z",  # loaded for the server's whole life
            "size_vram": 0,
            "context_length": self.backend.model.max_seq,
        }
        return JSONResponse({"models": [entry]})

    async def show(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        body = await self.served.intake.json(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        self._check_model(body.get("model") or body.get("name") or model_name(body))
        card = await self.served.card()
        template = self.backend.model.chat_template
        capabilities = ["completion"] + (["tools"] if card["supports_tools"] else [])
        if card["reasoning_mode"] != "never":
            capabilities.append("thinking")
        manifest = self._manifest
        architecture = manifest.get("architecture", {})
        return JSONResponse(
            {
                "modelfile": f"FROM {self._name}\n",
                "parameters": "",
                "template": template.source if template is not None else "",
                "details": self._details,
                "model_info": {
                    "general.architecture": architecture.get("family", ""),
                    f"{architecture.get('family', 'model')}.context_length": self.backend.model.max_seq,
                    f"{architecture.get('family', 'model')}.block_count": architecture.get("num_layers"),
                    f"{architecture.get('family', 'model')}.embedding_length": architecture.get(
                        "hidden_size"
                    ),
                },
                "capabilities": capabilities,
                "modified_at": created_at(self.backend.created),
            }
        )

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": OLLAMA_API_VERSION})

    # -- pieces ----------------------------------------------------------------------------------

    def _check_model(self, requested: str) -> str:
        """The name to answer with (404 unless ``requested`` names the served model)."""
        if requested not in (self.backend.model_id, self._name):
            raise ApiError(
                404,
                f"model {requested!r} not found; this server serves {self._name!r}",
                code="model_not_found",
            )
        return requested

    @property
    def _name(self) -> str:
        model_id = self.backend.model_id
        return model_id if ":" in model_id else model_id + DEFAULT_TAG

    @property
    def _entry(self) -> dict[str, Any]:
        return {
            "name": self._name,
            "model": self._name,
            "modified_at": created_at(self.backend.created),
            "size": self._size,
            "digest": self._digest,
            "details": self._details,
        }

    @cached_property
    def _manifest(self) -> dict[str, Any]:
        try:
            manifest = json.loads((self.backend.model.local_dir / "manifest.json").read_text())
        except (OSError, ValueError):
            return {}
        return manifest if isinstance(manifest, dict) else {}

    @cached_property
    def _digest(self) -> str:
        path = self.backend.model.local_dir / "manifest.json"
        try:
            return hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            return hashlib.sha256(self.backend.model_id.encode()).hexdigest()

    @cached_property
    def _size(self) -> int:
        folder = self.backend.model.local_dir
        return sum(path.stat().st_size for path in folder.iterdir() if path.is_file())

    @cached_property
    def _details(self) -> dict[str, Any]:
        manifest = self._manifest
        family = str(manifest.get("architecture", {}).get("family", ""))
        precision = manifest.get("precision", {})
        weights = precision.get("weights", "") if isinstance(precision, dict) else ""
        return {
            "parent_model": "",
            "format": "onnx",
            "family": family,
            "families": [family] if family else None,
            "parameter_size": "",
            "quantization_level": str(weights).upper(),
        }


async def _lines(served: Served, run: ReplyRun, line_for: Any) -> AsyncIterator[bytes]:
    async for event in run_events(run):
        if isinstance(event, Finished):
            served.metrics.record_reply(event.report)
        line = line_for(event)
        if line is not None:
            yield ndjson(line)
