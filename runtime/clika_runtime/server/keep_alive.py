"""Ollama's ``keep_alive``: how long a model stays loaded after a request, as a number of seconds.

A request's ``keep_alive`` (and the server's default, ``--keep-alive`` /
``CLIKA_KEEP_ALIVE``) is a duration string ("5m", "1h30m", "90s", "250ms"),
a number of seconds, 0 (unload once the request ends) or a negative value
(keep it loaded until the server stops), as Ollama reads them.
"""

from __future__ import annotations

import math
import re

from clika_runtime.server.errors import bad_request

DEFAULT_KEEP_ALIVE_S = 300.0
KEEP_ALIVE_ENV = "CLIKA_KEEP_ALIVE"
FOREVER = math.inf

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")


def parse_keep_alive(value: object) -> float:
    """Seconds to keep a model loaded (``math.inf``: until the server stops); ValueError naming the problem."""
    if isinstance(value, bool):
        raise ValueError(f"keep_alive must be a duration such as '5m', or seconds, not {value!r}")
    if isinstance(value, (int, float)):
        if math.isnan(value):
            raise ValueError("keep_alive must be a number of seconds or a duration, not NaN")
        return FOREVER if value < 0 else float(value)
    if not isinstance(value, str):
        raise ValueError(
            f"keep_alive must be a duration such as '5m', or seconds, not {type(value).__name__}"
        )
    text = value.strip()
    try:
        return parse_keep_alive(float(text))
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = _PART.findall(body)
    if not body or "".join(number + unit for number, unit in parts) != body:
        raise ValueError(f"keep_alive {value!r} is not a duration (e.g. '5m', '1h30m', '90s', 0 or -1)")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    return FOREVER if sign < 0 else seconds


def request_keep_alive(body: dict) -> float | None:
    """The ``keep_alive`` a request body names (None: the server's default); 400 when it is no duration."""
    if body.get("keep_alive") is None:
        return None
    try:
        return parse_keep_alive(body["keep_alive"])
    except ValueError as exc:
        raise bad_request(str(exc), "keep_alive") from None
