"""Reading a request before any model work: the API key, the body cap, the read timeout, bounded JSON,
and the worker threads requests are prepared on.

A body is read in full (or refused) before anything looks at it: at most
``max_body_bytes`` (413), within ``read_timeout`` seconds (408, so a client
that sends half a body cannot hold a handler forever), and parsed on a worker
thread (a few at a time, :class:`Preparing`) with
:func:`~clika_runtime.server.json_input.load_json`'s limits, so a
multi-megabyte body never stops the event loop.

Reading a request's JSON, checking it, rendering its chat template and
tokenizing its prompt run on worker threads; some of that (``json.loads``,
regex scans) holds the GIL for tens of milliseconds per megabyte without
yielding. With every request's preparation on its own thread, a burst of large
bodies would take turns holding the GIL and the event loop (``/health``,
streams already decoding) would wait behind all of them; at most
``MAX_PREPARING`` at a time, it waits behind one or two.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from starlette.requests import Request

from clika_runtime.server.errors import ApiError
from clika_runtime.server.json_input import load_json

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_READ_TIMEOUT = 30.0
MAX_PREPARING = 2

T = TypeVar("T")


class Preparing:
    """The worker threads requests are prepared on (created with the app, bound on first use)."""

    def __init__(self, limit: int = MAX_PREPARING) -> None:
        self.limit = limit
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        if self._limiter is None:  # made inside the event loop, the first time it is needed
            self._limiter = anyio.CapacityLimiter(self.limit)
        return await anyio.to_thread.run_sync(functools.partial(function, *args), limiter=self._limiter)


@dataclass(frozen=True)
class Intake:
    """How requests are admitted: ``api_key`` (None: open), the body cap and the read timeout."""

    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    read_timeout: float = DEFAULT_READ_TIMEOUT
    preparing: Preparing = field(default_factory=Preparing)

    def authorize(self, request: Request) -> None:
        """401 unless the request carries ``Authorization: Bearer <api_key>`` (when a key is set)."""
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

    async def json(self, request: Request) -> Any:
        """The body as checked JSON (413 too large, 408 too slow, 400 not acceptable JSON)."""
        body = await self.body(request)
        return await self.preparing.run(load_json, bytes(body))

    async def body(self, request: Request) -> bytearray:
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body_bytes:
            raise self._too_large(int(length))
        body = bytearray()
        try:
            with anyio.fail_after(self.read_timeout):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > self.max_body_bytes:
                        raise self._too_large(len(body))
        except TimeoutError:
            raise ApiError(
                408,
                f"the request body did not arrive within {self.read_timeout:g} s ({len(body)} bytes read)",
                code="request_timeout",
            ) from None
        return body

    def _too_large(self, size: int) -> ApiError:
        return ApiError(
            413,
            f"the request body has {size} bytes or more; this server takes at most {self.max_body_bytes}",
            code="request_too_large",
        )
