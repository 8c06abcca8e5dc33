"""Ollama's API on the same server: ``/api/chat``, ``/api/generate``, ``/api/version`` (the models:
``/api/tags``, ``/api/ps``, ``/api/show``, ``/api/pull``, ``/api/delete``, ``/api/copy`` in
:mod:`~clika_runtime.server.ollama.models`; ``/api/embed`` and ``/api/embeddings`` in
:mod:`~clika_runtime.server.embeddings.routes`).

Replies stream as NDJSON unless ``"stream": false``; errors are Ollama's
``{"error": "..."}`` with the HTTP status. A model answers to its name and to
the name with Ollama's default tag (``name:latest``); a request's
``keep_alive`` says how long its model stays loaded after it, and a request
with nothing to generate loads the model (or with ``keep_alive: 0`` unloads it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from clika_runtime.server.backend import Finished, ModelBackend, ReplyRun
from clika_runtime.server.bridge import run_events
from clika_runtime.server.endpoints import endpoint, routes_of
from clika_runtime.server.keep_alive import request_keep_alive
from clika_runtime.server.ollama.models import ollama_model_routes
from clika_runtime.server.ollama.protocol import GenerateRequest, parse_ollama_chat, parse_ollama_generate
from clika_runtime.server.ollama.shapes import (
    MEDIA_TYPE,
    chat_line,
    chat_response,
    generate_line,
    generate_response,
    loaded,
    ndjson,
)
from clika_runtime.server.protocol import ChatRequest
from clika_runtime.server.served import Served
from clika_runtime.server.streaming import SHUTDOWN_MESSAGE, EventStream, gather, guarded

Parsed = TypeVar("Parsed")

# The Ollama API version these routes follow (clients read it to pick features).
OLLAMA_API_VERSION = "0.12.0"


def ollama_routes(served: Served) -> list[Route]:
    return [*routes_of(_Ollama(served)), *ollama_model_routes(served)]


def ndjson_failure(message: str) -> bytes:
    return ndjson({"error": message})


def ndjson_farewell() -> bytes:
    return ndjson({"error": SHUTDOWN_MESSAGE})


class _Ollama:
    def __init__(self, served: Served) -> None:
        self.served = served

    # -- generation ----------------------------------------------------------------------------

    @endpoint("/api/chat", "POST")
    async def chat(self, request: Request) -> Response:
        parsed, keep_alive = await self._parsed(request, parse_ollama_chat)
        if not parsed.messages:
            return await self._load_or_unload(parsed.model, keep_alive, {"message": _EMPTY_MESSAGE})
        async with self.served.model(parsed.model, keep_alive) as backend:
            run = await self.served.prepare(backend.start_chat, parsed)
        return await self._answer(request, run, parsed, chat_line, chat_response)

    @endpoint("/api/generate", "POST")
    async def generate(self, request: Request) -> Response:
        parsed, keep_alive = await self._parsed(request, parse_ollama_generate)
        if not parsed.prompt and not parsed.images:
            return await self._load_or_unload(parsed.model, keep_alive, {"response": ""})
        async with self.served.model(parsed.model, keep_alive) as backend:
            run = await self.served.prepare(self._start_generate, backend, parsed)
        return await self._answer(request, run, parsed, generate_line, generate_response)

    async def _parsed(self, request: Request, parse: Callable[[Any], Parsed]) -> tuple[Parsed, float | None]:
        """The request's body read by ``parse`` (once the request is authorized), and its keep_alive."""
        self.served.intake.authorize(request)
        body = await self.served.intake.json(request)
        parsed = await self.served.prepare(parse, body)
        return parsed, request_keep_alive(body) if isinstance(body, dict) else None

    async def _answer(
        self,
        request: Request,
        run: ReplyRun,
        parsed: ChatRequest | GenerateRequest,
        line_for: Callable[[str, Any], dict[str, Any] | None],
        whole: Callable[[str, Any], dict[str, Any]],
    ) -> Response:
        """``run``'s reply as NDJSON lines (``line_for`` each event) when ``parsed`` streams, else as
        one object (``whole``), both named by the model ``parsed`` asked for."""
        name = parsed.model
        if parsed.stream:
            return self._stream(_lines(self.served, run, lambda e: line_for(name, e)), run, request)
        [reply] = await gather([run], request, self.served.closing, self.served.metrics.record_reply)
        return JSONResponse(whole(name, reply))

    async def _load_or_unload(self, name: str, keep_alive: float | None, empty: dict[str, Any]) -> Response:
        """Nothing to generate: Ollama's way to load a model, or with ``keep_alive: 0`` to unload it."""
        if keep_alive == 0:
            await run_in_threadpool(self.served.router.unload, name)
            return JSONResponse({**loaded(name), "done_reason": "unload", **empty})
        async with self.served.model(name, keep_alive):
            pass
        return JSONResponse({**loaded(name), **empty})

    def _start_generate(self, backend: ModelBackend, parsed: GenerateRequest) -> ReplyRun:
        if parsed.raw:  # the prompt is the model's text as it is: no template
            return backend.start_completion(parsed.prompt, parsed.options, parsed.max_tokens_given)
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
        return backend.start_chat(chat)

    def _stream(self, lines: AsyncIterator[bytes], run: ReplyRun, request: Request) -> Response:
        where = f"{request.method} {request.url.path}"
        return EventStream(
            guarded(lines, where, ndjson_failure),
            run.cancel,
            self.served.closing,
            ndjson_farewell,
            MEDIA_TYPE,
        )

    @endpoint("/api/version", "GET")
    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": OLLAMA_API_VERSION})


_EMPTY_MESSAGE = {"role": "assistant", "content": ""}


async def _lines(served: Served, run: ReplyRun, line_for: Any) -> AsyncIterator[bytes]:
    async for event in run_events(run):
        if isinstance(event, Finished):
            served.metrics.record_reply(event.report)
        line = line_for(event)
        if line is not None:
            yield ndjson(line)
