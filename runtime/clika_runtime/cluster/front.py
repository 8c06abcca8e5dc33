"""The front deployment: takes HTTP from Ray Serve's proxy, keys it, and hands it to an engine replica.

Every route of the single server is served by forwarding: the front reads the request,
computes its routing key (``prefix_key``) and calls the engine deployment, whose request
router (``router``) picks the replica; the replica's response messages stream back as they
come. Its own routes are the whole deployment's ``/health`` and ``/metrics`` (every replica's,
merged), ``/replicas`` (their names) and ``/replicas/<name>/<path>`` (one replica's route,
e.g. ``/replicas/<name>/metrics``).

Faults: a replica that dies before answering is the router's to replace: the request is
sent again (``RETRIES`` times) to one that lives; a replica that dies while streaming ends
its stream with an error event in the stream's protocol (an OpenAI ``error`` event and
``[DONE]``, an Ollama ``{"error": ...}`` line), never a hang; a whole reply cut short
is a 502 naming the replica.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from ray import serve
from ray.exceptions import RayError

from clika_runtime.cluster.aggregate import merged_health, merged_metrics
from clika_runtime.cluster.forwarded import ForwardedRequest
from clika_runtime.cluster.prefix_key import PrefixKeyer
from clika_runtime.cluster.router_registry import routers

RETRIES = 3
CALL_TIMEOUT_S = 30.0  # a replica's /health or /metrics, and waiting for the first replica
MAX_BODY_BYTES = 64 * 1024 * 1024  # the replica's app applies its own, smaller cap
REPLICA_LOST = "the replica serving this request stopped ({}); send the request again"
log = logging.getLogger("clika_runtime.cluster")


@serve.ingress()
class Front:
    def __init__(self, engine: Any, model: str, model_id: str) -> None:
        self.engine = engine
        self.keyer = PrefixKeyer(model)
        self.model_id = model_id

    def __serve_build_asgi_app__(self) -> Any:
        return _Asgi(self)

    async def asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        if body is None:
            await _json(send, 413, _error(f"the body is over {MAX_BODY_BYTES} bytes", "body_too_large"))
            return
        path = scope["path"]
        if scope["method"] == "GET" and path in ("/health", "/metrics", "/replicas"):
            await self._whole(path, scope, send)
            return
        pinned = None
        if path.startswith("/replicas/"):
            pinned, _, rest = path.removeprefix("/replicas/").partition("/")
            if pinned not in await self.replica_names():
                await _json(
                    send, 404, {"error": {"message": f"no replica named {pinned!r}", "code": "not_found"}}
                )
                return
            scope = {**scope, "path": "/" + rest, "raw_path": ("/" + rest).encode()}
        key = None if pinned else self.keyer.route_key(path, scope.get("headers", []), body)
        await self._forward(ForwardedRequest.of(scope, body, route_key=key, pinned=pinned), send)

    # -- forwarding ------------------------------------------------------------------------------

    async def _forward(self, request: ForwardedRequest, send: Any) -> None:
        for attempt in range(RETRIES + 1):
            replies = self.engine.options(stream=True).forward.remote(request)
            started: dict[str, Any] | None = None
            try:
                async for message in replies:
                    if message["type"] == "http.response.start":
                        started = message
                    await send(message)
                return
            except RayError as exc:
                if started is None and attempt < RETRIES:
                    log.warning("a replica stopped before answering (%s); sending the request again", exc)
                    continue
                if started is None:
                    await _json(send, 503, _error(REPLICA_LOST.format(type(exc).__name__), "replica_lost"))
                else:
                    await send(
                        {"type": "http.response.body", "body": _farewell(started, exc), "more_body": False}
                    )
                return
            except BaseException:  # the client left: stop the replica's decode too
                replies.cancel()
                raise

    # -- the whole deployment ----------------------------------------------------------------------

    async def replica_names(self) -> list[str]:
        for router in routers():
            if names := router.replica_names():
                return names
        await self.engine.identity.remote()  # the first call starts this handle's router
        for router in routers():
            if names := router.replica_names():
                return names
        return []

    async def _whole(self, path: str, scope: dict[str, Any], send: Any) -> None:
        names = await self.replica_names()
        if path == "/replicas":
            await _json(send, 200, {"replicas": names, "routing": [router.stats() for router in routers()]})
        elif path == "/health":
            loads = await self._each(names, lambda fwd: self.engine.load.remote(fwd))
            health = merged_health(self.model_id, loads)
            await _json(send, 200 if health["status"] != "down" else 503, health)
        else:
            texts = await self._each(names, lambda fwd: self._text_of(fwd, scope))
            merged = merged_metrics({name: text for name, text in texts.items() if text is not None})
            await _send(send, 200, merged.encode(), b"text/plain; version=0.0.4; charset=utf-8")

    async def _each(self, names: list[str], call: Any) -> dict[str, Any]:
        async def one(name: str) -> Any:
            try:
                return await asyncio.wait_for(call(ForwardedRequest({}, b"", pinned=name)), CALL_TIMEOUT_S)
            except (RayError, asyncio.TimeoutError) as exc:
                log.warning("replica %s did not answer: %s", name, exc)
                return None

        answers = await asyncio.gather(*(one(name) for name in names))
        return dict(zip(names, answers, strict=True))

    async def _text_of(self, pinned: ForwardedRequest, scope: dict[str, Any]) -> str | None:
        request = ForwardedRequest.of({**scope, "path": "/metrics"}, b"", pinned=pinned.pinned)
        chunks = []
        status = 500
        async for message in self.engine.options(stream=True).forward.remote(request):
            if message["type"] == "http.response.start":
                status = message["status"]
            else:
                chunks.append(message.get("body", b""))
        return b"".join(chunks).decode() if status == 200 else None


class _Asgi:
    """The front's ASGI 3 callable (a bound method reads to uvicorn as an ASGI 2 app)."""

    def __init__(self, front: Front) -> None:
        self.front = front

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.front.asgi(scope, receive, send)


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _farewell(started: dict[str, Any], exc: BaseException) -> bytes:
    """The error event ending a stream whose replica stopped, in the stream's own protocol."""
    message = REPLICA_LOST.format(type(exc).__name__)
    kind = dict(started.get("headers", [])).get(b"content-type", b"")
    if kind.startswith(b"text/event-stream"):
        return b"data: " + json.dumps(_error(message, "replica_lost")).encode() + b"\n\ndata: [DONE]\n\n"
    if kind.startswith(b"application/x-ndjson"):
        return json.dumps({"error": message}).encode() + b"\n"
    return b""


def _error(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error", "param": None, "code": code}}


async def _read_body(receive: Any) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None  # under this the replica's own, smaller cap answers
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _json(send: Any, status: int, payload: dict[str, Any]) -> None:
    await _send(send, status, json.dumps(payload).encode(), b"application/json")


async def _send(send: Any, status: int, body: bytes, kind: bytes) -> None:
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
