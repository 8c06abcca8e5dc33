"""The access-log line is written before a reply's last bytes leave the server.

A client that has read its whole reply (a test, a log shipper counting lines) must find the line
already there; the middleware is driven directly so no thread or socket timing is involved.
"""

import asyncio
import logging

from clika_runtime.server.observe import Observe


class _CountingMetrics:
    def __init__(self) -> None:
        self.requests = []

    def record_request(self, method, route, status, seconds) -> None:
        self.requests.append((method, route, status))


async def _streaming_app(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


async def _failing_app(scope, receive, send) -> None:
    raise RuntimeError("handler broke before replying")


def _scope(path: str) -> dict:
    return {"type": "http", "method": "POST", "path": path, "client": ("127.0.0.1", 5)}


def test_the_line_and_the_count_exist_when_the_last_bytes_are_sent(caplog):
    metrics = _CountingMetrics()
    middleware = Observe(_streaming_app, metrics=metrics, routes=["/v1/chat/completions"])
    seen_at_last_send = []

    async def send(message):
        if message["type"] == "http.response.body" and not message.get("more_body"):
            seen_at_last_send.append((len(caplog.records), list(metrics.requests)))

    with caplog.at_level(logging.INFO, logger="clika_runtime.server.access"):
        asyncio.run(middleware(_scope("/v1/chat/completions"), None, send))
    assert seen_at_last_send == [(1, [("POST", "/v1/chat/completions", 200)])]
    assert len(caplog.records) == 1  # written once, not again when the handler returns
    assert '"POST /v1/chat/completions" 200 23 ' in caplog.records[0].getMessage()


def test_a_handler_that_raises_still_gets_one_line_as_500(caplog):
    metrics = _CountingMetrics()
    middleware = Observe(_failing_app, metrics=metrics, routes=[])

    async def send(message):
        raise AssertionError("nothing is sent by a handler that raised")

    with caplog.at_level(logging.INFO, logger="clika_runtime.server.access"):
        try:
            asyncio.run(middleware(_scope("/v1/elsewhere"), None, send))
        except RuntimeError:
            pass
    assert metrics.requests == [("POST", "other", 500)]
    assert [r.getMessage().split(" ", 1)[1] for r in caplog.records][0].startswith(
        '"POST /v1/elsewhere" 500 0 '
    )
