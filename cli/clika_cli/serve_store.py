"""``clika serve``'s store mode: every cached model on demand (MODEL, when named, the default and loaded first).

The options the mode adds: ``--keep-alive`` (how long an idle model stays
loaded; also ``$CLIKA_KEEP_ALIVE``), ``--max-loaded`` and ``--memory-budget``
(a size such as ``8GB``: weights plus KV budget of the models loaded at once).
"""

from __future__ import annotations

import re
from typing import Any

import click

from clika_cli.common import EngineChoice, say
from clika_runtime.store import DEFAULT_PRECISION, LocalModel

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def parse_size(text: str) -> int:
    """Bytes of a size such as ``8GB``, ``512MiB`` or ``1000000`` (BadParameter naming the problem)."""
    match = _SIZE.match(text)
    if match is None:
        raise click.BadParameter(f"{text!r} is no size: give bytes or a size such as 8GB or 512MiB")
    unit = (match.group(2) or "").lower().removesuffix("b")
    return int(float(match.group(1)) * _UNITS[unit])


def store_router(
    local: LocalModel | None, engine: EngineChoice, keep_alive: str | None, **limits: Any
) -> Any:
    """The router over the store's models, ``local`` (when named) its default, loaded before serving."""
    from clika_runtime.server import build_router
    from clika_runtime.server.errors import ApiError
    from clika_runtime.server.keep_alive import parse_keep_alive

    try:
        seconds = None if keep_alive is None else parse_keep_alive(keep_alive)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--keep-alive") from None
    default = None
    if local is not None:
        default = local.name if local.precision == DEFAULT_PRECISION else f"{local.name}:{local.precision}"
    load_options = {
        "threads": engine.threads,
        "kv_cache_mode": engine.kv_cache_mode,
        "kv_cache_dtype": engine.kv_cache_dtype,
        "allow_spinning": engine.spin,
    }
    router = build_router(default=default, keep_alive=seconds, load_options=load_options, **limits)
    names = [entry.name for entry in router.entries()]
    if not names:
        say("the model store is empty: `clika pull NAME` (or POST /api/pull) adds models")
    if default is not None:
        try:
            with router.lease(default):
                pass
        except ApiError as exc:
            router.close()
            raise click.ClickException(exc.message) from None
    return router


def chat_in_the_browser(local: LocalModel | None, engine: EngineChoice, resume: str | None) -> None:
    """``clika chat --web``: serve the store on 127.0.0.1 (port 8000, else a free one) and open the page."""
    import webbrowser

    from clika_cli.conversations import store_file
    from clika_runtime.server import require_server_stack, serve

    try:
        require_server_stack()
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None
    router = store_router(local, engine, None)

    def ready(url: str) -> None:
        page = url.removesuffix("/v1") + "/" + (f"#{resume}" if resume else "")
        say(f"chat page at {page} (Ctrl-C stops)")
        webbrowser.open(page)

    try:
        serve(router, port=_free_port(8000), on_ready=ready, log_level="warning", conversations=store_file())
    except KeyboardInterrupt:
        say("stopped")


def _free_port(preferred: int) -> int:
    """``preferred`` when nothing listens on it at 127.0.0.1, else 0 (a free port)."""
    import socket

    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", preferred))
        except OSError:
            return 0
    return preferred
