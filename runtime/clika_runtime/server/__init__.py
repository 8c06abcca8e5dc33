"""An HTTP server speaking OpenAI's and Ollama's APIs (Starlette + uvicorn, the ``server`` extra).

::

    from clika_runtime import modelverse
    from clika_runtime.server import build_router, serve

    serve(modelverse.load("path/to/model-folder"), port=8000)   # one model; blocks; Ctrl-C stops
    serve(build_router(max_loaded=2), port=8000)                # every model in the store, on demand

    # or in the background (tests, notebooks):
    with start_server(model, port=0) as server:
        print(server.url)  # http://127.0.0.1:<port>/v1

Every request to a model shares that model's ONE engine, so concurrent requests decode together.
The server binds 127.0.0.1 unless told otherwise. Starlette and uvicorn are
imported only when a server is built, so the runtime runs without them.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clika_runtime.chat.session import ChatSession
    from clika_runtime.engine.engine import Engine
    from clika_runtime.modelverse import GenerativeModel
    from clika_runtime.server.backend import ModelBackend
    from clika_runtime.server.model_entries import ModelEntry
    from clika_runtime.server.router import ModelRouter

from clika_runtime.server.serve_options import BACKGROUND, ServeOptions, resolve_options

__all__ = [
    "RunningServer",
    "ServeOptions",
    "build_backend",
    "build_router",
    "require_server_stack",
    "serve",
    "start_server",
]


def build_backend(
    model: GenerativeModel | ChatSession | str | Path,
    *,
    model_id: str | None = None,
    max_active: int = 8,
    max_queued: int = 64,
    engine: Engine | None = None,
    threads: int | None = None,
    default_max_tokens: int = 1024,
    image_files: bool = False,
) -> ModelBackend:
    """The served model: a loaded model, a chat session or a model folder; the id clients use; one engine.

    Requests run on the model's engine (a chat session's model's), its limits
    raised to ``max_active`` decoding together and ``max_queued`` waiting when
    those are higher; ``engine`` names another engine built over ``model``. The
    server admits ``max_active + max_queued`` requests of its own at once.
    ``default_max_tokens`` bounds a reply whose request names no ``max_tokens``.
    ``image_files``: ``image_url`` parts may name local files (data: URLs always; remote never).
    """
    from clika_runtime import modelverse
    from clika_runtime.chat.session import ChatSession
    from clika_runtime.server.backend import ModelBackend

    if isinstance(model, ChatSession):
        model = model.model  # its turns and the server's requests share the model's engine
    owns = isinstance(model, (str, Path))
    loaded = modelverse.load(model, threads=threads) if owns else model
    if not isinstance(loaded, modelverse.GenerativeModel):
        raise TypeError(
            f"serve() takes a GenerativeModel, a ChatSession or a model folder, not {type(model).__name__}"
        )
    name = model_id or (Path(model).name if owns else loaded.local_dir.name)
    return ModelBackend(
        loaded,
        name,
        max_active=max_active,
        max_queued=max_queued,
        engine=engine,
        owns_model=owns,
        default_max_tokens=default_max_tokens,
        image_files=image_files,
    )


def build_router(
    *,
    default: str | None = None,
    keep_alive: float | None = None,
    max_loaded: int | None = None,
    memory_budget: int | None = None,
    max_active: int = 8,
    max_queued: int = 64,
    default_max_tokens: int = 1024,
    image_files: bool = False,
    load_options: Mapping[str, Any] | None = None,
    open_model: Callable[[ModelEntry], GenerativeModel] | None = None,
) -> ModelRouter:
    """A router over every model in the store (``$CLIKA_CACHE``), each loaded when a request names it.

    ``default``: the model named at start (loaded first by the CLI; listed
    like the others). ``keep_alive``: seconds a model stays loaded after its
    last request (None: ``$CLIKA_KEEP_ALIVE`` or 5 minutes; ``math.inf``:
    until the server stops). ``max_loaded`` and ``memory_budget`` (bytes of
    weights plus KV budget) bound what is loaded at once, the least recently
    used idle model unloaded first. ``load_options``: ``modelverse.load``'s
    keyword arguments (threads, kv_cache_mode, ...); ``open_model(entry)``
    replaces how a model is loaded (it gets the store's entry).
    """
    import os

    from clika_runtime import modelverse
    from clika_runtime.server.backend import ModelBackend
    from clika_runtime.server.footprint import footprint
    from clika_runtime.server.keep_alive import DEFAULT_KEEP_ALIVE_S, KEEP_ALIVE_ENV, parse_keep_alive
    from clika_runtime.server.model_entries import store_entries
    from clika_runtime.server.router import ModelRouter

    options = dict(load_options or {})
    if keep_alive is None:
        configured = os.environ.get(KEEP_ALIVE_ENV)
        keep_alive = parse_keep_alive(configured) if configured else DEFAULT_KEEP_ALIVE_S

    def load(entry: ModelEntry) -> GenerativeModel:
        return modelverse.load(entry.folder, **options)

    def open_backend(entry: ModelEntry) -> ModelBackend:
        model = (open_model or load)(entry)
        try:
            return ModelBackend(
                model,
                entry.name,
                max_active=max_active,
                max_queued=max_queued,
                owns_model=True,
                default_max_tokens=default_max_tokens,
                image_files=image_files,
            )
        except BaseException:
            model.close()
            raise

    kv = {
        "kv_mode": options.get("kv_cache_mode") or "continuous",
        "kv_dtype": options.get("kv_cache_dtype") or "float32",
        "kv_cache_bytes": options.get("kv_cache_bytes"),
    }
    return ModelRouter(
        store_entries,
        open_backend,
        lambda entry: footprint(entry.folder, max_active, **kv),
        default=default,
        keep_alive=keep_alive,
        max_loaded=max_loaded,
        memory_budget=memory_budget,
    )


def serve(
    model: GenerativeModel | ChatSession | str | Path | ModelRouter,
    options: ServeOptions | None = None,
    *,
    on_ready: Callable[[str], Any] | None = None,
    **overrides: Any,
) -> None:
    """Serve ``model`` (a GenerativeModel, a ChatSession's engine, a model folder, or a
    :func:`build_router` over the store's models) until Ctrl-C.

    ``options`` and keyword ``overrides`` of its fields: :class:`ServeOptions`.
    ``on_ready(url)`` is called once the socket listens.
    """
    router, server, sock = _listening(model, resolve_options(options, overrides, ServeOptions()))
    try:
        if on_ready is not None:
            on_ready(_url(sock))
        server.run(sockets=[sock])
    finally:
        router.close()


class RunningServer:
    """A server on a background thread: ``url`` (ends in ``/v1``), ``router``, ``backend``, ``stop()``."""

    def __init__(self, router: ModelRouter, server: Any, sock: socket.socket) -> None:
        self.router = router
        self._server = server
        self._socket = sock
        self.host, self.port = sock.getsockname()[:2]
        self.url = _url(sock)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="clika-server", daemon=True
        )
        self._thread.start()

    @property
    def backend(self) -> ModelBackend:
        """The served model's backend (a router's: its default model's, else the last used)."""
        backend = self.router.backend_of(self.router.default or "") or self.router.any_backend()
        if backend is None:
            raise LookupError("no model is loaded")
        return backend

    @property
    def base_url(self) -> str:
        """``http://host:port`` without the ``/v1``."""
        return self.url.removesuffix("/v1")

    def wait_started(self, timeout: float = 30.0) -> None:
        """Block until uvicorn accepts connections."""
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server thread stopped before it started")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not start within {timeout} s")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop accepting, end open streams, and release the engine (and a model the server loaded)."""
        self._server.should_exit = True
        self._thread.join(30)
        self.router.close()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(
    model: GenerativeModel | ChatSession | str | Path | ModelRouter,
    options: ServeOptions | None = None,
    **overrides: Any,
) -> RunningServer:
    """Serve ``model`` on a background thread (``port=0``: an ephemeral port); returns once it listens.

    The options are :func:`serve`'s, from :data:`~clika_runtime.server.serve_options.BACKGROUND`
    (port 0, the access log off) unless ``options`` is given.
    """
    router, server, sock = _listening(model, resolve_options(options, overrides, BACKGROUND))
    try:
        running = RunningServer(router, server, sock)
        running.wait_started()
    except BaseException:
        router.close()
        raise
    return running


def _listening(
    model: GenerativeModel | ChatSession | str | Path | ModelRouter, options: ServeOptions
) -> tuple[ModelRouter, Any, socket.socket]:
    """The router and a bound (not yet serving) uvicorn server for ``model`` under ``options``;
    the router is closed again when binding fails."""
    require_server_stack()
    from clika_runtime.server.router import ModelRouter, pinned_router

    if isinstance(model, ModelRouter):
        router = model
    else:
        router = pinned_router(
            build_backend(
                model,
                model_id=options.model_id,
                max_active=options.max_active,
                max_queued=options.max_queued,
                engine=options.engine,
                default_max_tokens=options.default_max_tokens,
                image_files=options.image_files,
            )
        )
    try:
        return (router, *_uvicorn_server(router, options))
    except BaseException:
        router.close()
        raise


def _uvicorn_server(router: ModelRouter, options: ServeOptions) -> tuple[Any, socket.socket]:
    from clika_runtime.server.app import DEFAULT_MAX_BODY_BYTES, DEFAULT_READ_TIMEOUT, create_app
    from clika_runtime.server.lifecycle import configure_logging, uvicorn_server
    from clika_runtime.server.streaming import Closing

    closing = Closing()
    timeout = options.read_timeout or DEFAULT_READ_TIMEOUT
    app = create_app(
        router,
        api_key=options.api_key,
        max_body_bytes=options.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
        read_timeout=timeout,
        cors_origins=options.cors_origins,
        closing=closing,
        web=options.web,
        conversations=options.conversations,
    )
    configure_logging(options.log_level, options.access_log)
    # Bound here (not by uvicorn) so port 0 yields its real port before serving starts.
    sock = socket.create_server((options.host, options.port), family=_family(options.host), reuse_port=False)
    return uvicorn_server(app, closing, log_level=options.log_level, read_timeout=timeout), sock


def require_server_stack() -> None:
    """Fail before loading anything when the ``server`` extra is missing."""
    try:
        import prometheus_client  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"the server needs starlette, uvicorn and prometheus_client: pip install 'clika-runtime[server]' ({exc})"
        ) from None


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"
