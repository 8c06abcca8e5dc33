"""One access-log line per request, and its count and time in the metrics.

The line is written as the response's last bytes are sent (a stream: when it closes), with
the method, path, status, bytes sent, seconds and the client's address. Route
labels are the served routes' paths, anything else is ``other``, so a client
probing random paths cannot grow the metrics without bound.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from clika_runtime.server.metrics import Metrics

access_log = logging.getLogger("clika_runtime.server.access")


class Observe:
    """ASGI middleware: log and count every HTTP request."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Collection[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = frozenset(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500  # what the boundary answers when nothing was sent
        sent = 0
        logged = False

        def log_once() -> None:
            nonlocal logged
            if logged:
                return
            logged = True
            seconds = time.perf_counter() - began
            path = scope.get("path", "")
            method = scope.get("method", "")
            route = path if path in self.routes else "other"
            self.metrics.record_request(method, route, status, seconds)
            client = scope.get("client") or ("-", 0)
            access_log.info(
                '%s:%s "%s %s" %d %d %.3fs', client[0], client[1], method, path, status, sent, seconds
            )

        async def observed_send(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
                if not message.get("more_body", False):
                    # Before the last bytes leave: a client that has read its whole reply
                    # can count on its line (and its metrics) being there already.
                    log_once()
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            log_once()  # a reply cut short (client gone, handler raised) still gets its line
