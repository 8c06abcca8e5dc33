"""The OpenAI-compatible HTTP app (Starlette): routes, API key, body cap, SSE streaming.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /v1/models`` (and ``/v1/models/{id}``), ``GET /health``. Every refusal
answers in OpenAI's error shape with its status: 400 malformed body or
over-long prompt, 401 missing or wrong API key, 404 unknown model or route,
413 body too large, 503 queue full. A client that disconnects cancels its
request's decode at the next engine step, streamed or not.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from clika_runtime.server.backend import ModelBackend, ReplyRun
from clika_runtime.server.bridge import run_events
from clika_runtime.server.errors import ApiError, bad_request, error_body
from clika_runtime.server.protocol import parse_chat, parse_completion
from clika_runtime.server.shapes import (
    DONE,
    ChatChunks,
    CompletionChunks,
    Reply,
    chat_completion,
    completion,
    new_id,
    sse,
)

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


def create_app(
    backend: ModelBackend, *, api_key: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> Starlette:
    """The ASGI app serving ``backend`` (``api_key``: required as ``Authorization: Bearer <key>``)."""
    routes = _Routes(backend, api_key, max_body_bytes)
    app = Starlette(
        routes=[
            Route("/health", routes.health, methods=["GET"]),
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", routes.model, methods=["GET"]),
            Route("/v1/chat/completions", routes.chat_completions, methods=["POST"]),
            Route("/v1/completions", routes.completions, methods=["POST"]),
        ],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, Exception: _server_error},
    )
    app.state.backend = backend
    return app


class _Routes:
    def __init__(self, backend: ModelBackend, api_key: str | None, max_body_bytes: int) -> None:
        self.backend = backend
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.backend.model_id, **self.backend.load()})

    async def models(self, request: Request) -> Response:
        self._authorize(request)
        return JSONResponse({"object": "list", "data": [self._card()]})

    async def model(self, request: Request) -> Response:
        self._authorize(request)
        self.backend.check_model(request.path_params["model_id"])
        return JSONResponse(self._card())

    async def chat_completions(self, request: Request) -> Response:
        self._authorize(request)
        parsed = parse_chat(await self._json(request))
        self.backend.check_model(parsed.model)
        run = await run_in_threadpool(self.backend.start_chat, parsed)
        reply_id = new_id("chatcmpl")
        if parsed.stream:
            chunks = ChatChunks(reply_id, self.backend.model_id, run.created, parsed.include_usage)
            return EventStream(_chat_stream(run, chunks), on_close=run.cancel)
        [reply] = await _gather([run], request)
        return JSONResponse(chat_completion(reply_id, self.backend.model_id, run.created, reply))

    async def completions(self, request: Request) -> Response:
        self._authorize(request)
        parsed = parse_completion(await self._json(request))
        self.backend.check_model(parsed.model)
        runs: list[ReplyRun] = []
        try:
            for prompt in parsed.prompts:  # all submitted before any is read: they decode together
                runs.append(
                    await run_in_threadpool(
                        self.backend.start_completion, prompt, parsed.options, parsed.max_tokens_given
                    )
                )
        except BaseException:
            for run in runs:
                run.cancel()
            raise
        reply_id = new_id("cmpl")
        if parsed.stream:
            chunks = CompletionChunks(reply_id, self.backend.model_id, runs[0].created, parsed.include_usage)
            return EventStream(_completion_stream(runs[0], chunks), on_close=runs[0].cancel)
        replies = await _gather(runs, request)
        return JSONResponse(completion(reply_id, self.backend.model_id, runs[0].created, replies))

    # -- checks ------------------------------------------------------------------------------

    def _authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if not header:
            raise ApiError(
                401, "no API key given: send it as 'Authorization: Bearer <key>'", code="invalid_api_key"
            )
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self.api_key.encode()
        ):
            raise ApiError(401, "incorrect API key", code="invalid_api_key")

    async def _json(self, request: Request) -> Any:
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body_bytes:
            raise self._too_large(int(length))
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_body_bytes:
                raise self._too_large(len(body))
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from None

    def _too_large(self, size: int) -> ApiError:
        return ApiError(
            413,
            f"the request body has {size} bytes or more; this server takes at most {self.max_body_bytes}",
            code="request_too_large",
        )

    def _card(self) -> dict[str, Any]:
        model = self.backend.model
        return {
            "id": self.backend.model_id,
            "object": "model",
            "created": self.backend.created,
            "owned_by": "clika-runtime",
            "context_window": model.max_seq,
            "supports_tools": model.supports_tools,
            "reasoning_mode": model.reasoning_mode,
        }


# -- replies -----------------------------------------------------------------------------------


async def _gather(runs: list[ReplyRun], request: Request) -> list[Reply]:
    """The whole replies; a client that disconnects meanwhile cancels every decode of its request."""
    watcher = asyncio.ensure_future(_cancel_on_disconnect(request, runs))
    try:
        return list(await asyncio.gather(*(_collect(run) for run in runs)))
    finally:
        watcher.cancel()
        for run in runs:  # no-op for finished runs; stops the others when one failed
            run.cancel()


async def _collect(run: ReplyRun) -> Reply:
    reply = Reply()
    try:
        async for event in run_events(run):
            reply.add(event)
    except RuntimeError as exc:
        raise ApiError(500, str(exc), code="generation_failed") from None
    return reply


async def _cancel_on_disconnect(request: Request, runs: list[ReplyRun]) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            for run in runs:
                run.cancel()
            return


async def _chat_stream(run: ReplyRun, chunks: ChatChunks) -> AsyncIterator[bytes]:
    yield sse(chunks.first())
    try:
        async for event in run_events(run):
            for chunk in chunks.for_event(event):
                yield sse(chunk)
    except RuntimeError as exc:  # after the headers went out: the error travels in the stream
        yield sse(error_body(500, str(exc), code="generation_failed"))
    yield DONE


async def _completion_stream(run: ReplyRun, chunks: CompletionChunks) -> AsyncIterator[bytes]:
    try:
        async for event in run_events(run):
            for chunk in chunks.for_event(event):
                yield sse(chunk)
    except RuntimeError as exc:
        yield sse(error_body(500, str(exc), code="generation_failed"))
    yield DONE


class EventStream(StreamingResponse):
    """A server-sent event stream that stops (and calls ``on_close``) the moment the client leaves.

    Starlette's StreamingResponse notices a disconnect only on its next write
    under some servers; here a listener runs beside the writer, so a request
    still waiting in the queue, or in a long prefill, is cancelled at once.
    """

    def __init__(self, chunks: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
        super().__init__(chunks, media_type="text/event-stream", headers=headers)
        self.chunks = chunks
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._write, send, group.cancel_scope)
                await _wait_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            self.on_close()
            await self.chunks.aclose()  # type: ignore[attr-defined]

    async def _write(self, send: Send, scope: anyio.CancelScope) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        scope.cancel()


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


# -- errors ------------------------------------------------------------------------------------


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    headers = {"retry-after": "1"} if exc.status == 503 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = f"{request.method} {request.url.path}: {exc.detail}"
    return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code)


async def _server_error(request: Request, exc: Exception) -> Response:
    message = f"internal error: {type(exc).__name__}: {exc}"
    return JSONResponse(error_body(500, message), status_code=500)
