"""The error boundary: a fault that escapes a handler is one log line with an id and a 500 naming that id.

Client mistakes never get here: they are refused where they are read, as 4xx
ApiErrors. What does get here is the server's own fault, so the client gets
the id to report, the log gets one line with the same id (no traceback
flooding the log per request), and the server keeps serving. The body is in
the shape of the front end the request went to (OpenAI's, or Ollama's on
``/api/*``).
"""

from __future__ import annotations

import logging
import secrets

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from clika_runtime.server.errors import error_json

log = logging.getLogger("clika_runtime.server")


def fault_id() -> str:
    return "err-" + secrets.token_hex(6)


def log_fault(scope_or_path: str, exc: BaseException) -> str:
    """Log ``exc`` as one line under a new id; returns the id."""
    ident = fault_id()
    log.error("%s %s: %s: %s", ident, scope_or_path, type(exc).__name__, exc)
    return ident


class ErrorBoundary:
    """ASGI middleware: any exception from the app becomes a shaped 500 (or ends a started response)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            path = scope.get("path", "")
            ident = log_fault(f"{scope.get('method', '')} {path}", exc)
            if started:  # the status went out already: all that is left is ending the response
                return
            message = f"internal server error {ident}: {type(exc).__name__}"
            body = error_json(path, 500, message, code="internal_error")
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [(b"content-type", b"application/json"), (b"x-error-id", ident.encode())],
                }
            )
            await send({"type": "http.response.body", "body": body})
