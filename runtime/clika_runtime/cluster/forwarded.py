"""An HTTP request carried from the front deployment to an engine replica, and its run there.

The front reads the whole body (requests here are JSON of a few KB) so that the
request router can see what the request is before choosing a replica; the
replica then plays the request into the same ASGI app ``clika serve`` runs and
hands back the app's ``http.response.*`` messages one by one, so a streamed
reply stays streamed across the hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

# The ASGI scope keys a replica's app reads; the rest (the server's socket, its state) stays behind.
_SCOPE_KEYS = ("type", "http_version", "method", "scheme", "path", "raw_path", "query_string", "headers")


@dataclass
class ForwardedRequest:
    """One request as the router and the replica see it: its ASGI scope, its body, its routing key.

    ``route_key``: the conversation's prefix key or session id (None: no preference);
    ``pinned``: a replica's id when the request is for that replica alone (its /health, /metrics).
    """

    scope: dict[str, Any]
    body: bytes
    route_key: str | None = None
    pinned: str | None = None
    kind: str = field(default="http")

    @classmethod
    def of(cls, scope: dict[str, Any], body: bytes, **routing: Any) -> ForwardedRequest:
        kept = {key: scope[key] for key in _SCOPE_KEYS if key in scope}
        kept["raw_path"] = kept.get("raw_path") or kept["path"].encode()
        kept["root_path"] = ""
        kept["client"] = scope.get("client")
        kept["server"] = scope.get("server")
        return cls(kept, body, **routing)


async def run_asgi(app: Any, request: ForwardedRequest) -> AsyncIterator[dict[str, Any]]:
    """Run ``request`` through ``app`` here; yield its response messages as the app sends them.

    When the caller stops reading (the client left, or the front gave up), the app
    sees a disconnect, which cancels the request's decode as a direct client's would.
    """
    messages: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    gone = asyncio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        await messages.put(message)

    async def run() -> None:
        try:
            await app(dict(request.scope), receive, send)
        finally:
            await messages.put(None)

    task = asyncio.create_task(run())
    try:
        while (message := await messages.get()) is not None:
            yield message
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                break
        await task
    finally:
        gone.set()
        if not task.done():
            try:
                await asyncio.wait_for(task, 10)
            except (asyncio.TimeoutError, Exception):
                task.cancel()
