"""OpenAI's routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models`` (and one model).

Every model-side step (rendering the template, tokenizing, submitting) runs
on a worker thread, never on the event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from clika_runtime.server.backend import Finished, ReplyRun
from clika_runtime.server.bridge import run_events
from clika_runtime.server.errors import error_body
from clika_runtime.server.protocol import CompletionRequest, parse_chat, parse_completion
from clika_runtime.server.served import Served
from clika_runtime.server.shapes import (
    DONE,
    ChatChunks,
    CompletionChunks,
    chat_completion,
    completion,
    new_id,
    sse,
)
from clika_runtime.server.streaming import SHUTDOWN_MESSAGE, EventStream, gather, guarded


def openai_routes(served: Served) -> list[Route]:
    handlers = _OpenAI(served)
    return [
        Route("/v1/models", handlers.models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", handlers.model, methods=["GET"]),
        Route("/v1/chat/completions", handlers.chat_completions, methods=["POST"]),
        Route("/v1/completions", handlers.completions, methods=["POST"]),
    ]


def sse_failure(message: str) -> bytes:
    """An error event, then ``[DONE]``: how an OpenAI stream ends when it cannot finish."""
    return sse(error_body(500, message, code="generation_failed")) + DONE


def sse_farewell() -> bytes:
    return sse(error_body(503, SHUTDOWN_MESSAGE, code="server_shutting_down")) + DONE


class _OpenAI:
    def __init__(self, served: Served) -> None:
        self.served = served
        self.backend = served.backend

    async def models(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        return JSONResponse({"object": "list", "data": [await self._card()]})

    async def model(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        self.backend.check_model(request.path_params["model_id"])
        return JSONResponse(await self._card())

    async def chat_completions(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        parsed = await self.served.prepare(parse_chat, await self.served.intake.json(request))
        self.backend.check_model(parsed.model)
        run = await self.served.prepare(self.backend.start_chat, parsed)
        reply_id = new_id("chatcmpl")
        if parsed.stream:
            chunks = ChatChunks(reply_id, self.backend.model_id, run.created, parsed.include_usage)
            return self._stream(_chat_stream(self.served, run, chunks), run, request)
        [reply] = await gather([run], request, self.served.closing, self.served.metrics.record_reply)
        return JSONResponse(chat_completion(reply_id, self.backend.model_id, run.created, reply))

    async def completions(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        parsed = await self.served.prepare(parse_completion, await self.served.intake.json(request))
        self.backend.check_model(parsed.model)
        runs = await self.served.prepare(self._start_completions, parsed)
        echoes = [await self.served.prepare(self._echo, parsed, prompt) for prompt in parsed.prompts]
        reply_id = new_id("cmpl")
        if parsed.stream:
            chunks = CompletionChunks(reply_id, self.backend.model_id, runs[0].created, parsed.include_usage)
            return self._stream(_completion_stream(self.served, runs[0], chunks, echoes[0]), runs[0], request)
        replies = await gather(runs, request, self.served.closing, self.served.metrics.record_reply)
        for reply, echo in zip(replies, echoes, strict=True):
            if echo:
                reply.text.insert(0, echo)
        return JSONResponse(completion(reply_id, self.backend.model_id, runs[0].created, replies))

    def _start_completions(self, parsed: CompletionRequest) -> list[ReplyRun]:
        runs: list[ReplyRun] = []
        try:
            for prompt in parsed.prompts:  # all submitted before any is read: they decode together
                runs.append(self.backend.start_completion(prompt, parsed.options, parsed.max_tokens_given))
        except BaseException:
            for run in runs:
                run.cancel()
            raise
        return runs

    def _echo(self, parsed: CompletionRequest, prompt: str | list[int]) -> str:
        if not parsed.echo:
            return ""
        return prompt if isinstance(prompt, str) else self.backend.model.tokenizer.decode(prompt)

    def _stream(self, chunks: AsyncIterator[bytes], run: ReplyRun, request: Request) -> Response:
        where = f"{request.method} {request.url.path}"
        return EventStream(guarded(chunks, where, sse_failure), run.cancel, self.served.closing, sse_farewell)

    async def _card(self) -> dict[str, Any]:
        return {
            "id": self.backend.model_id,
            "object": "model",
            "created": self.backend.created,
            "owned_by": "clika-runtime",
            **await self.served.card(),
        }


async def _chat_stream(served: Served, run: ReplyRun, chunks: ChatChunks) -> AsyncIterator[bytes]:
    yield sse(chunks.first())
    async for event in run_events(run):
        if isinstance(event, Finished):
            served.metrics.record_reply(event.report)
        for chunk in chunks.for_event(event):
            yield sse(chunk)
    yield DONE


async def _completion_stream(
    served: Served, run: ReplyRun, chunks: CompletionChunks, echo: str
) -> AsyncIterator[bytes]:
    if echo:
        yield sse(chunks.chunk(echo))
    async for event in run_events(run):
        if isinstance(event, Finished):
            served.metrics.record_reply(event.report)
        for chunk in chunks.for_event(event):
            yield sse(chunk)
    yield DONE
