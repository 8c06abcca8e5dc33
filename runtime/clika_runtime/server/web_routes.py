"""The chat page at ``/``: static files shipped inside the package (``server/web/``), no network, no build.

Every file is read once and answered with a strict Content-Security-Policy:
scripts, styles and connections to this server alone, no inline script, no
frames, images only from the page itself or ``data:``/``blob:`` (attached
ones). The page talks to the server's own API (``/v1/chat/completions``
streamed, ``/v1/models``, ``/api/conversations``).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "markdown.js": "text/javascript; charset=utf-8",
    "chat.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def web_routes() -> list[Route]:
    return [
        Route("/", _page("index.html"), methods=["GET"]),
        *(Route(f"/web/{name}", _page(name), methods=["GET"]) for name in FILES),
    ]


def page_bytes() -> dict[str, int]:
    """Each file's size (the page's weight)."""
    return {name: len(_read(name)) for name in FILES}


@cache
def _read(name: str) -> bytes:
    return resources.files("clika_runtime.server").joinpath("web", name).read_bytes()


def _page(name: str):
    async def page(request: Request) -> Response:
        return Response(_read(name), media_type=FILES[name], headers=HEADERS)

    return page
