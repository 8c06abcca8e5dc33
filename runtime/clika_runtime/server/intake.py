"""Reading a request before any model work: the API key, the body cap, the read timeout, bounded JSON.

A body is read in full (or refused) before anything looks at it: at most
``max_body_bytes`` (413), within ``read_timeout`` seconds (408, so a client
that sends half a body cannot hold a handler forever), and parsed on a worker
thread (a few at a time, see :mod:`~clika_runtime.server.preparing`) with
:func:`~clika_runtime.server.json_input.load_json`'s limits, so a
multi-megabyte body never stops the event loop.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.requests import Request

from clika_runtime.server.errors import ApiError
from clika_runtime.server.json_input import load_json
from clika_runtime.server.preparing import Preparing

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_READ_TIMEOUT = 30.0


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
