"""An HTTP server over one model speaking OpenAI's and Ollama's APIs (Starlette + uvicorn, the ``server`` extra).

::

    from clika_runtime import modelverse
    from clika_runtime.server import serve

    serve(modelverse.load("path/to/model-folder"), port=8000)   # blocks; Ctrl-C stops

    # or in the background (tests, notebooks):
    with start_server(model, port=0) as server:
        print(server.url)  # http://127.0.0.1:<port>/v1

Every request shares the model's ONE engine, so concurrent requests decode together.
The server binds 127.0.0.1 unless told otherwise. Starlette and uvicorn are
imported only when a server is built, so the runtime runs without them.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clika_runtime.chat.session import ChatSession
    from clika_runtime.engine.engine import Engine
    from clika_runtime.modelverse import GenerativeModel
    from clika_runtime.server.backend import ModelBackend

__all__ = ["RunningServer", "build_backend", "require_server_stack", "serve", "start_server"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


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


def serve(
    model: GenerativeModel | ChatSession | str | Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    api_key: str | None = None,
    model_id: str | None = None,
    max_active: int = 8,
    max_queued: int = 64,
    max_body_bytes: int | None = None,
    engine: Engine | None = None,
    default_max_tokens: int = 1024,
    log_level: str = "info",
    on_ready: Any = None,
    cors_origins: Sequence[str] = (),
    read_timeout: float | None = None,
    access_log: bool = True,
    image_files: bool = False,
) -> None:
    """Serve ``model`` (a GenerativeModel, a ChatSession's engine, or a model folder) until Ctrl-C.

    ``api_key``: clients must send ``Authorization: Bearer <key>``.
    ``cors_origins``: the origins browsers may call from (``*``: any).
    ``read_timeout``: seconds a client has to send a whole request (default 30).
    ``access_log``: one line per request on stderr.
    ``image_files``: ``image_url`` parts may name local files (off: data: URLs only).
    ``on_ready(url)`` is called once the socket listens.
    """
    backend, server, sock = _listening(model, locals())  # first: locals() are the arguments
    try:
        if on_ready is not None:
            on_ready(_url(sock))
        server.run(sockets=[sock])
    finally:
        backend.close()


class RunningServer:
    """A server on a background thread: ``url`` (ends in ``/v1``), ``backend``, ``stop()``."""

    def __init__(self, backend: ModelBackend, server: Any, sock: socket.socket) -> None:
        self.backend = backend
        self._server = server
        self._socket = sock
        self.host, self.port = sock.getsockname()[:2]
        self.url = _url(sock)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="clika-server", daemon=True
        )
        self._thread.start()

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
        self.backend.close()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(
    model: GenerativeModel | ChatSession | str | Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = 0,
    api_key: str | None = None,
    model_id: str | None = None,
    max_active: int = 8,
    max_queued: int = 64,
    max_body_bytes: int | None = None,
    engine: Engine | None = None,
    default_max_tokens: int = 1024,
    log_level: str = "warning",
    cors_origins: Sequence[str] = (),
    read_timeout: float | None = None,
    access_log: bool = False,
    image_files: bool = False,
) -> RunningServer:
    """Serve ``model`` on a background thread (``port=0``: an ephemeral port); returns once it listens.

    The options are :func:`serve`'s; the access log is off unless asked for.
    """
    backend, server, sock = _listening(model, locals())  # first: locals() are the arguments
    try:
        running = RunningServer(backend, server, sock)
        running.wait_started()
    except BaseException:
        backend.close()
        raise
    return running


def _listening(
    model: GenerativeModel | ChatSession | str | Path, options: Mapping[str, Any]
) -> tuple[ModelBackend, Any, socket.socket]:
    """The backend and a bound (not yet serving) uvicorn server for ``model`` under ``options``,
    :func:`serve`'s keyword arguments; the backend is closed again when binding fails."""
    require_server_stack()
    backend = build_backend(
        model,
        model_id=options["model_id"],
        max_active=options["max_active"],
        max_queued=options["max_queued"],
        engine=options["engine"],
        default_max_tokens=options["default_max_tokens"],
        image_files=options["image_files"],
    )
    try:
        return (backend, *_uvicorn_server(backend, options))
    except BaseException:
        backend.close()
        raise


def _uvicorn_server(backend: ModelBackend, options: Mapping[str, Any]) -> tuple[Any, socket.socket]:
    from clika_runtime.server.app import DEFAULT_MAX_BODY_BYTES, DEFAULT_READ_TIMEOUT, create_app
    from clika_runtime.server.lifecycle import configure_logging, uvicorn_server
    from clika_runtime.server.streaming import Closing

    closing = Closing()
    timeout = options["read_timeout"] or DEFAULT_READ_TIMEOUT
    app = create_app(
        backend,
        api_key=options["api_key"],
        max_body_bytes=options["max_body_bytes"] or DEFAULT_MAX_BODY_BYTES,
        read_timeout=timeout,
        cors_origins=options["cors_origins"],
        closing=closing,
    )
    configure_logging(options["log_level"], options["access_log"])
    # Bound here (not by uvicorn) so port 0 yields its real port before serving starts.
    host = options["host"]
    sock = socket.create_server((host, options["port"]), family=_family(host), reuse_port=False)
    return uvicorn_server(app, closing, log_level=options["log_level"], read_timeout=timeout), sock


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
