"""Client JSON read with limits: nesting depth, integer size and valid Unicode, each a 400 naming the spot.

Python's ``json`` accepts things the rest of the server cannot carry: an
array nested a thousand deep raises RecursionError (in the parser, or later
in a template's ``tojson``), an integer over 4,300 digits raises ValueError,
and a ``"\\ud800"`` escape yields a lone surrogate that no UTF-8 encoder (the
tokenizer, the response writer) accepts. Every one of them is the client's
doing, so each becomes a 400 here, before any other code sees the value.
The walk is iterative: checking depth must not itself recurse.
"""

from __future__ import annotations

import json
import re
from typing import Any

from clika_runtime.server.errors import bad_request

# Deeper than any real request (tool schemas nest a few levels); far below Python's recursion limit.
MAX_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")
# How a surrogate can get into parsed JSON: a \uD800-\uDFFF escape, or its raw (invalid UTF-8) bytes
# (lead byte 0xED), which json's decoder lets through. A body with neither needs no scan of its
# strings; plain substring tests keep that check to a millisecond for megabytes.
_SURROGATE_HINTS = (b"\\ud", b"\\uD", b"\xed")


def load_json(data: bytes | str, what: str = "the request body", param: str | None = None) -> Any:
    """``data`` parsed and checked (400 ApiError naming ``what`` when it is not acceptable JSON)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise bad_request(f"{what} nests deeper than {MAX_DEPTH} levels", param) from None
    except UnicodeDecodeError as exc:
        raise bad_request(f"{what} is not valid UTF-8: {exc}", param) from None
    except ValueError as exc:  # JSONDecodeError, and integers past Python's digit limit
        raise bad_request(f"{what} is not valid JSON: {exc}", param) from None
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    check_value(value, what, param, surrogates=any(hint in raw for hint in _SURROGATE_HINTS))
    return value


def check_value(value: Any, what: str, param: str | None = None, *, surrogates: bool = True) -> None:
    """400 when ``value`` nests deeper than MAX_DEPTH or holds a lone surrogate (in a key or a string).

    ``surrogates=False`` skips the string scan (the source had no way to spell one).
    """
    pending: list[tuple[Any, int, str]] = [(value, 0, "")]
    while pending:
        item, depth, path = pending.pop()
        if isinstance(item, str):
            if surrogates:
                _check_text(item, what, path, param)
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth >= MAX_DEPTH:
            raise bad_request(f"{what} nests deeper than {MAX_DEPTH} levels (at {path or 'the top'})", param)
        if isinstance(item, dict):
            for key, child in item.items():
                if surrogates:
                    _check_text(key, what, path, param)
                pending.append((child, depth + 1, f"{path}.{key}" if path else str(key)))
        else:
            pending.extend((child, depth + 1, f"{path}[{i}]") for i, child in enumerate(item))


def _check_text(text: str, what: str, path: str, param: str | None) -> None:
    found = _SURROGATE.search(text)
    if found is not None:
        where = f" at {path}" if path else ""
        raise bad_request(
            f"{what} holds a lone UTF-16 surrogate (\\u{ord(found.group()):04x}){where}; "
            "text must be valid Unicode",
            param or path or None,
        )
