"""``POST /v1/responses``: OpenAI's Responses API, stateless (nothing is stored, nothing retrieved).

The request runs as a chat request on the shared engine; the reply comes
back as a ``response`` object or, streamed, as named server-sent events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from clika_runtime.server.backend import Finished, ReplyRun
from clika_runtime.server.bridge import run_events
from clika_runtime.server.responses.protocol import parse_responses
from clika_runtime.server.responses.shapes import ResponseEvents, ResponseObject, named_sse
from clika_runtime.server.served import Served
from clika_runtime.server.streaming import SHUTDOWN_MESSAGE, EventStream, gather, guarded


def responses_routes(served: Served) -> list[Route]:
    async def create(request: Request) -> Response:
        served.intake.authorize(request)
        parsed = await served.prepare(parse_responses, await served.intake.json(request))
        async with served.model(parsed.chat.model) as backend:
            run = await served.prepare(backend.start_chat, parsed.chat)
        response = ResponseObject(backend.model_id, run.created, parsed.echoed)
        if parsed.chat.stream:
            events = ResponseEvents(response)

            def failure(message: str) -> bytes:
                return named_sse(events.error(message, "generation_failed"))

            def farewell() -> bytes:
                return named_sse(events.error(SHUTDOWN_MESSAGE, "server_shutting_down"))

            where = f"{request.method} {request.url.path}"
            stream = guarded(_stream(served, run, events), where, failure)
            return EventStream(stream, run.cancel, served.closing, farewell)
        [reply] = await gather([run], request, served.closing, served.metrics.record_reply)
        return JSONResponse(response.whole(reply))

    return [Route("/v1/responses", create, methods=["POST"])]


async def _stream(served: Served, run: ReplyRun, events: ResponseEvents) -> AsyncIterator[bytes]:
    for payload in events.start():
        yield named_sse(payload)
    async for event in run_events(run):
        if isinstance(event, Finished):
            served.metrics.record_reply(event.report)
        for payload in events.for_event(event):
            yield named_sse(payload)
