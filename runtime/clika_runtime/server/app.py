"""The HTTP app (Starlette): OpenAI's API, the Responses API and Ollama's API over one backend.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``,
``POST /v1/embeddings``, ``POST /v1/responses``, ``GET /v1/models`` (and ``/v1/models/{id}``), the
Ollama routes under ``/api/`` (see :mod:`~clika_runtime.server.ollama.routes`),
``GET /health``, ``GET /metrics``, and the chat page at ``/`` with its
``/api/conversations`` (see :mod:`~clika_runtime.server.web_routes`). Every refusal answers in the front end's
error shape with its status: 400 malformed body or over-long prompt, 401
missing or wrong API key, 404 unknown model or route, 408 a body that does not
arrive in time, 413 body too large, 503 queue full or shutting down; a fault
of the server's own is a 500 naming the id of its one log line. A client that
disconnects cancels its request's decode at the next engine step, streamed or
not.

Middleware, outermost first: the access log and metrics (every request, CORS
preflights too), CORS (when origins are given), the error boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from clika_runtime.server.backend import ModelBackend
from clika_runtime.server.boundary import ErrorBoundary
from clika_runtime.server.conversation_routes import ConversationFile, conversation_routes
from clika_runtime.server.embeddings.routes import embeddings_routes
from clika_runtime.server.errors import ApiError, error_payload
from clika_runtime.server.intake import DEFAULT_MAX_BODY_BYTES, DEFAULT_READ_TIMEOUT, Intake
from clika_runtime.server.metrics import CONTENT_TYPE, Metrics
from clika_runtime.server.observe import Observe
from clika_runtime.server.ollama.routes import ollama_routes
from clika_runtime.server.openai.routes import openai_routes
from clika_runtime.server.responses.routes import responses_routes
from clika_runtime.server.router import ModelRouter, pinned_router
from clika_runtime.server.served import Served
from clika_runtime.server.streaming import Closing
from clika_runtime.server.web_routes import web_routes

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_READ_TIMEOUT", "create_app"]


def create_app(
    models: ModelRouter | ModelBackend,
    *,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    cors_origins: Sequence[str] = (),
    closing: Closing | None = None,
    web: bool = True,
    conversations: Path | None = None,
) -> Starlette:
    """The ASGI app serving ``models``: a router over the models it may load, or one loaded backend
    (``api_key``: required as ``Authorization: Bearer <key>``).

    ``cors_origins``: origins a browser may call from (``*`` for any);
    ``closing``: the signal that ends open streams when the server stops.
    ``web``: the chat page at ``/`` and the stored conversations it reads
    (``conversations``: their SQLite file, default the one ``clika chat`` uses).
    The app holds no other state: building it again over the same router
    (one per worker process or replica) serves the same models.
    """
    router = models if isinstance(models, ModelRouter) else pinned_router(models)
    metrics = Metrics(lambda: [model.backend for model in router.loaded()])
    router.on_cancelled = metrics.record_cancelled
    served = Served(router, Intake(api_key, max_body_bytes, read_timeout), closing or Closing(), metrics)
    routes = [
        Route("/health", _health(served), methods=["GET"]),
        Route("/metrics", _metrics(served), methods=["GET"]),
        *openai_routes(served),
        *embeddings_routes(served),
        *responses_routes(served),
        *ollama_routes(served),
    ]
    if web:
        routes += [*web_routes(), *conversation_routes(served, ConversationFile(conversations))]
    middleware = [Middleware(Observe, metrics=served.metrics, routes=[route.path for route in routes])]
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["*"],
                allow_headers=["*"],
                expose_headers=["x-error-id"],
            )
        )
    middleware.append(Middleware(ErrorBoundary))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
    )
    app.state.served = served
    return app


def _health(served: Served):
    async def health(request: Request) -> Response:
        status = "shutting_down" if served.closing.closing else "ok"
        loaded = [model.backend for model in served.router.loaded()]
        load = {"active": 0, "waiting": 0}
        for backend in loaded:
            for key, value in backend.load().items():
                load[key] = load.get(key, 0) + value
        model = served.router.default or (loaded[0].model_id if loaded else None)
        return JSONResponse(
            {"status": status, "model": model, "loaded": [b.model_id for b in loaded], **load}
        )

    return health


def _metrics(served: Served):
    async def metrics(request: Request) -> Response:
        served.intake.authorize(request)
        # Off the event loop: the integrity gauge waits for the engine's step to end.
        return Response(await run_in_threadpool(served.metrics.render), media_type=CONTENT_TYPE)

    return metrics


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    headers = {"retry-after": "1"} if exc.status == 503 else None
    body = error_payload(request.url.path, exc.status, exc.message, param=exc.param, code=exc.code)
    return JSONResponse(body, status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = f"{request.method} {request.url.path}: {exc.detail}"
    body = error_payload(request.url.path, exc.status_code, message)
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)
