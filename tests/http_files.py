"""A real HTTP server on 127.0.0.1 for download tests: byte ranges, recorded requests, cut-off bodies.

``FileServer`` answers GET and HEAD through a ``route(handler_path) -> Served``
callable; ``Served`` carries the body and headers. ``cut_after(name, n)`` makes
the next response for that name stop after ``n`` bytes and drop the connection
(deterministic: no timing involved), as a network failure would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Served:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    ranged: bool = False  # whether a Range request may select part of the body
    cut_key: str = ""  # the name ``cut_after`` refers to


@dataclass
class Seen:
    method: str
    path: str
    headers: Message


class FileServer:
    def __init__(self, route: Callable[[str, Message], Served]) -> None:
        self.route = route
        self.requests: list[Seen] = []
        self._cuts: dict[str, int] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def cut_after(self, key: str, size: int) -> None:
        self._cuts[key] = size

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self) -> None:
                self._answer(send_body=False)

            def do_GET(self) -> None:
                self._answer(send_body=True)

            def log_message(self, *args) -> None:
                pass

            def _answer(self, send_body: bool) -> None:
                headers = self.headers  # case-insensitive, as HTTP header names are
                server.requests.append(Seen(self.command, self.path, headers))
                served = server.route(self.path, headers)
                status, body, extra = served.status, served.body, dict(served.headers)
                wanted = self.headers.get("Range")
                if served.ranged and wanted and status == 200:
                    start = int(wanted.removeprefix("bytes=").split("-")[0])
                    if start >= len(body):
                        status, body = 416, b""
                        extra["Content-Range"] = f"bytes */{len(served.body)}"
                    else:
                        status = 206
                        extra["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
                        body = body[start:]
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                if served.ranged:
                    self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(body)))
                cut = server._cuts.pop(served.cut_key, None) if send_body and served.cut_key else None
                if cut is not None:
                    self.send_header("Connection", "close")
                self.end_headers()
                if not send_body:
                    return
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        return Handler
