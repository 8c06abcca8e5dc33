"""OpenAI's routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models`` (and one model).

Every model-side step (rendering the template, tokenizing, submitting) runs
on a worker thread, never on the event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from clika_runtime.contract.manifest import Manifest, ManifestError
from clika_runtime.server.backend import Finished, ModelBackend, ReplyRun, start_all
from clika_runtime.server.bridge import run_events
from clika_runtime.server.endpoints import endpoint, routes_of
from clika_runtime.server.errors import bad_request, error_body
from clika_runtime.server.keep_alive import request_keep_alive
from clika_runtime.server.model_entries import ModelEntry
from clika_runtime.server.openai.choices import merged_chunks
from clika_runtime.server.openai.logprobs import TokenText, chat_logprobs
from clika_runtime.server.openai.protocol import CompletionRequest, parse_chat, parse_completion
from clika_runtime.server.openai.shapes import (
    DONE,
    ChatChunks,
    CompletionChunks,
    chat_completion,
    completion,
    new_id,
    sse,
)
from clika_runtime.server.served import Served
from clika_runtime.server.streaming import SHUTDOWN_MESSAGE, EventStream, gather, guarded


def openai_routes(served: Served) -> list[Route]:
    return routes_of(_OpenAI(served))


def sse_failure(message: str) -> bytes:
    """An error event, then ``[DONE]``: how an OpenAI stream ends when it cannot finish."""
    return sse(error_body(500, message, code="generation_failed")) + DONE


def sse_farewell() -> bytes:
    return sse(error_body(503, SHUTDOWN_MESSAGE, code="server_shutting_down")) + DONE


class _OpenAI:
    def __init__(self, served: Served) -> None:
        self.served = served

    @endpoint("/v1/models", "GET")
    async def models(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        entries = await run_in_threadpool(self.served.router.entries)
        return JSONResponse({"object": "list", "data": [await self._card(entry) for entry in entries]})

    @endpoint("/v1/models/{model_id:path}", "GET")
    async def model(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        entry = await run_in_threadpool(self.served.router.entry, request.path_params["model_id"])
        return JSONResponse(await self._card(entry))

    @endpoint("/v1/chat/completions", "POST")
    async def chat_completions(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        body = await self.served.intake.json(request)
        parsed = await self.served.prepare(parse_chat, body)
        async with self.served.model(parsed.model, request_keep_alive(body)) as backend:
            runs = await self.served.prepare(backend.start_chat_choices, parsed, parsed.n)
        run = runs[0]
        reply_id = new_id("chatcmpl")
        token_text = self._token_text(backend, parsed.options)
        if parsed.stream:
            if len(runs) > 1:
                return self._stream_choices(
                    backend, reply_id, runs, parsed.include_usage, request, token_text
                )
            chunks = ChatChunks(reply_id, backend.model_id, run.created, parsed.include_usage)
            return self._stream(_chat_stream(self.served, run, chunks, token_text), run, request)
        replies = await gather(runs, request, self.served.closing, self.served.metrics.record_reply)
        return JSONResponse(chat_completion(reply_id, backend.model_id, run.created, replies, token_text))

    @endpoint("/v1/completions", "POST")
    async def completions(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        body = await self.served.intake.json(request)
        parsed = await self.served.prepare(parse_completion, body)
        if parsed.stream and parsed.n > 1:
            raise bad_request(
                "a streamed completion takes one choice ('n': 1); chat completions stream n", "n"
            )
        async with self.served.model(parsed.model, request_keep_alive(body)) as backend:
            runs = await self.served.prepare(self._start_completions, backend, parsed)
        echoes = [
            await self.served.prepare(self._echo, backend, parsed, prompt)
            for prompt in parsed.prompts
            for _ in range(parsed.n)
        ]
        reply_id = new_id("cmpl")
        if parsed.stream:
            chunks = CompletionChunks(reply_id, backend.model_id, runs[0].created, parsed.include_usage)
            return self._stream(_completion_stream(self.served, runs[0], chunks, echoes[0]), runs[0], request)
        replies = await gather(runs, request, self.served.closing, self.served.metrics.record_reply)
        for reply, echo in zip(replies, echoes, strict=True):
            if echo:
                reply.text.insert(0, echo)
                reply.echoed = True
        token_text = self._token_text(backend, parsed.options)
        return JSONResponse(completion(reply_id, backend.model_id, runs[0].created, replies, token_text))

    def _start_completions(self, backend: ModelBackend, parsed: CompletionRequest) -> list[ReplyRun]:
        start = backend.start_completion
        return start_all(  # all submitted before any is read: they decode together
            partial(start, prompt, parsed.options, parsed.max_tokens_given, choice)
            for prompt in parsed.prompts
            for choice in range(parsed.n)
        )

    def _echo(self, backend: ModelBackend, parsed: CompletionRequest, prompt: str | list[int]) -> str:
        if not parsed.echo:
            return ""
        return prompt if isinstance(prompt, str) else backend.model.tokenizer.decode(prompt)

    def _token_text(self, backend: ModelBackend, options: dict[str, Any]) -> TokenText | None:
        """How logprobs entries name a token, when the request asked for logprobs."""
        return backend.token_text if options.get("logprobs") is not None else None

    def _stream_choices(
        self,
        backend: ModelBackend,
        reply_id: str,
        runs: list[ReplyRun],
        include_usage: bool,
        request: Request,
        token_text: TokenText | None = None,
    ) -> Response:
        model, created = backend.model_id, runs[0].created
        makers = [ChatChunks(reply_id, model, created, include_usage, index=i) for i in range(len(runs))]
        usage_base = makers[0].base if include_usage else None

        async def chunks() -> AsyncIterator[bytes]:
            for maker in makers:
                yield sse(maker.first())
            chunkers = [
                _with_logprobs(m.for_event, run, token_text) for m, run in zip(makers, runs, strict=True)
            ]
            merged = merged_chunks(runs, chunkers, usage_base, self.served.metrics.record_reply)
            async for chunk in merged:
                yield sse(chunk)
            yield DONE

        def cancel() -> None:
            for run in runs:
                run.cancel()

        where = f"{request.method} {request.url.path}"
        return EventStream(guarded(chunks(), where, sse_failure), cancel, self.served.closing, sse_farewell)

    def _stream(self, chunks: AsyncIterator[bytes], run: ReplyRun, request: Request) -> Response:
        where = f"{request.method} {request.url.path}"
        return EventStream(guarded(chunks, where, sse_failure), run.cancel, self.served.closing, sse_farewell)

    async def _card(self, entry: ModelEntry) -> dict[str, Any]:
        """A model as ``/v1/models`` lists it (what it can do once it is loaded; its window always)."""
        backend = self.served.router.backend_of(entry.name)
        card = (
            await self.served.card(backend)
            if backend is not None
            else await run_in_threadpool(_folder_card, entry)
        )
        return {
            "id": entry.name,
            "object": "model",
            "created": int(entry.modified) if backend is None else backend.created,
            "owned_by": "clika-runtime",
            **card,
        }


def _folder_card(entry: ModelEntry) -> dict[str, Any]:
    """What a model not loaded yet tells of itself without loading: its context window."""
    try:
        return {"context_window": Manifest.read(entry.folder).context_window}
    except ManifestError:
        return {}


async def _chat_stream(
    served: Served, run: ReplyRun, chunks: ChatChunks, token_text: TokenText | None = None
) -> AsyncIterator[bytes]:
    yield sse(chunks.first())
    chunker = _with_logprobs(chunks.for_event, run, token_text)
    async for event in run_events(run):
        if isinstance(event, Finished):
            served.metrics.record_reply(event.report)
        for chunk in chunker(event):
            yield sse(chunk)
    yield DONE


def _with_logprobs(
    chunker: Callable[[Any], list[dict[str, Any]]], run: ReplyRun, token_text: TokenText | None
) -> Callable[[Any], list[dict[str, Any]]]:
    """``chunker`` whose first chunk of an event carries the log-probabilities of the tokens that
    arrived with it (when the request asked for them)."""
    if token_text is None:
        return chunker

    def chunks(event: Any) -> list[dict[str, Any]]:
        made = chunker(event)
        entries = run.take_logprobs()
        if entries and made and made[0].get("choices"):
            made[0]["choices"][0]["logprobs"] = chat_logprobs(entries, token_text)
        return made

    return chunks


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
