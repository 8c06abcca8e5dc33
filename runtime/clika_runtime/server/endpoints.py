"""Routes declared beside their handlers: ``@endpoint(path, *methods)`` on a handler class's methods.

Each front end keeps its handlers as methods of one object over the ``Served``
(``_OpenAI``, ``_Ollama``, ...). Marking a method with its path and methods
keeps the route where its handler is read, and ``routes_of`` turns the object
into its Starlette routes::

    class _Embeddings:
        @endpoint("/v1/embeddings", "POST")
        async def openai(self, request: Request) -> Response: ...

    routes = routes_of(_Embeddings(served))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from starlette.routing import Route

Handler = TypeVar("Handler", bound=Callable[..., Any])

# The attribute a marked method carries: its (path, methods).
_MARK = "_clika_endpoint"


def endpoint(path: str, *methods: str) -> Callable[[Handler], Handler]:
    """Mark a handler method as the endpoint of ``path`` for ``methods`` ("GET", "POST", ...)."""

    def mark(handler: Handler) -> Handler:
        setattr(handler, _MARK, (path, list(methods)))
        return handler

    return mark


def routes_of(handlers: object) -> list[Route]:
    """One route per marked method of ``handlers``' own class, bound to ``handlers``, in the order
    the class defines them."""
    routes = []
    for name, member in vars(type(handlers)).items():
        marked = getattr(member, _MARK, None)
        if marked is not None:
            path, methods = marked
            routes.append(Route(path, getattr(handlers, name), methods=list(methods)))
    return routes
