"""The server's life around the app: uvicorn with a header read timeout, a shutdown that ends streams, logging.

uvicorn times out idle keep-alive connections but not a request whose
headers never finish arriving, so a client could hold a connection open
forever with half a request line; :class:`_TimedH11` closes a connection whose
request headers are not complete ``read_timeout`` seconds after its first
bytes (the body's own timeout is the app's, see ``Intake``).

On shutdown uvicorn stops listening and waits for open connections, then
cancels them; :class:`_ClosingServer` first tells every open stream to end
with its protocol's farewell, so the wait is short and no stream is cut.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from clika_runtime.server.streaming import Closing

GRACEFUL_SHUTDOWN_S = 5


def uvicorn_server(app: Any, closing: Closing, *, log_level: str, read_timeout: float) -> uvicorn.Server:
    protocol = type("TimedH11", (_TimedH11,), {"read_timeout": read_timeout})
    config = uvicorn.Config(
        app,
        log_level=log_level,
        lifespan="off",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        access_log=False,  # the app writes its own line per request
        http=protocol,
    )
    return _ClosingServer(config, closing)


def configure_logging(log_level: str, access_log: bool) -> None:
    """Send the server's own log (faults; with ``access_log`` one line per request) to stderr, once."""
    logger = logging.getLogger("clika_runtime.server")
    logger.setLevel(log_level.upper())
    logging.getLogger("clika_runtime.server.access").setLevel(logging.INFO if access_log else logging.WARNING)
    if not any(isinstance(handler, _StderrHandler) for handler in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logger.addHandler(handler)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is now (a handler that kept an old one would write to a closed file)."""

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # noqa: ANN001
        pass


class _ClosingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, closing: Closing) -> None:
        super().__init__(config)
        self.closing = closing

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.closing.begin()  # open streams write their farewell and end
        await super().shutdown(sockets)


def _send_without_delay(transport: asyncio.Transport) -> None:
    """TCP_NODELAY on an accepted connection. asyncio sets it only when the socket's proto is
    IPPROTO_TCP, and one from ``socket.create_server`` has proto 0: without it a response's body
    waits for the client to acknowledge its headers, which Linux delays by 40 ms on keep-alive."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _TimedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing connections whose request headers stall (and sending
    without Nagle's delay)."""

    read_timeout: float = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        _send_without_delay(transport)
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._between_requests():
            if self._header_timer is None:  # the first bytes of a next request: its headers are due
                self._arm()
        elif self._header_timer is not None:  # the headers are in: the app times the body
            self._header_timer.cancel()
            self._header_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.read_timeout, self._headers_timed_out)

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self._between_requests() and not self.transport.is_closing():
            self.transport.close()
