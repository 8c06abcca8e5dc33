"""How a server listens and what it admits: one value that ``serve`` and ``start_server`` share.

Both take a :class:`ServeOptions` (``options=``) and any of its fields as keyword
arguments over it, so each option is named once, here; an unknown keyword is a
TypeError naming it. ``start_server`` starts from :data:`BACKGROUND` (an ephemeral
port, quiet logs) instead of the foreground defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clika_runtime.engine.engine import Engine

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


@dataclass(frozen=True)
class ServeOptions:
    """``host``/``port``: where to listen (127.0.0.1 unless told; port 0: an ephemeral one).
    ``api_key``: clients must send ``Authorization: Bearer <key>``. ``model_id``: the name
    clients use for a single served model. ``max_active`` requests decode together and
    ``max_queued`` wait; ``max_body_bytes`` bounds a request body and ``read_timeout``
    (seconds, default 30) the time a client has to send it. ``engine``: an engine to serve
    on. ``default_max_tokens`` bounds a reply whose request names none. ``log_level`` and
    ``access_log`` (one line per request on stderr). ``cors_origins``: the origins browsers
    may call from (``*``: any). ``image_files``: ``image_url`` parts may name local files
    (off: data: URLs only). ``web``: the chat page at ``/``, its stored conversations in
    ``conversations`` (default: the SQLite file ``clika chat`` saves to)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    model_id: str | None = None
    max_active: int = 8
    max_queued: int = 64
    max_body_bytes: int | None = None
    engine: Engine | None = None
    default_max_tokens: int = 1024
    log_level: str = "info"
    cors_origins: Sequence[str] = ()
    read_timeout: float | None = None
    access_log: bool = True
    image_files: bool = False
    web: bool = True
    conversations: Path | None = None


# start_server's starting point: a background server for tests and notebooks.
BACKGROUND = ServeOptions(port=0, log_level="warning", access_log=False)


def resolve_options(
    options: ServeOptions | None, overrides: Mapping[str, Any], base: ServeOptions
) -> ServeOptions:
    """``options`` (else ``base``) with ``overrides`` applied; an unknown name is refused, named."""
    known = {f.name for f in fields(ServeOptions)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(
            f"unknown server option(s) {', '.join(unknown)}; the options are {', '.join(sorted(known))}"
        )
    return replace(options or base, **overrides)
