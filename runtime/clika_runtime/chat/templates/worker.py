"""The render process: compiles and renders chat templates for its parent, one request at a time.

Started by ``clika_runtime.chat.templates.sandbox`` as ``python -m
clika_runtime.chat.templates.worker MAX_BYTES``. Templates are untrusted code,
so they never run in the process that holds the model: here the address space
is capped (``RLIMIT_AS`` = MAX_BYTES, so a template that allocates gigabytes,
at compile time or while rendering, gets a MemoryError instead of the
machine's memory), the output length is checked piece by piece, and the
parent kills the process when a render takes too long.

Frames on stdin/stdout are a 4-byte big-endian length and a body: requests are
pickles from the parent (trusted), replies are JSON (so the parent never
unpickles what a template produced). Every failure becomes a reply naming it.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import struct
import sys
from collections import OrderedDict
from typing import Any, BinaryIO

import jinja2
import jinja2.meta

from clika_runtime.chat.templates.environment import make_environment, template_lineno
from clika_runtime.park_points import park

_HEADER = struct.Struct(">I")
_CACHED_TEMPLATES = 8


class _LimitReached(Exception):
    pass


class _Renderer:
    def __init__(self, max_bytes: int) -> None:
        self.env = make_environment()
        self.max_bytes = max_bytes
        self.compiled: OrderedDict[str, tuple[jinja2.Template, list[str]]] = OrderedDict()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to one request; ``fatal`` asks the parent for a fresh process."""
        try:
            template, variables = self._compiled(request["source"])
            if request["op"] == "compile":
                return {"ok": True, "variables": variables}
            park("render")  # an interrupt test holds the render here
            return {"ok": True, "text": self._render(template, request["context"], request["max_chars"])}
        except jinja2.exceptions.TemplateSyntaxError as exc:
            return _failure(exc.message or "syntax error", exc.lineno)
        except jinja2.exceptions.TemplateError as exc:
            return _failure(exc.message or type(exc).__name__, template_lineno(exc))
        except _LimitReached as exc:
            return _failure(str(exc), None, limit=True)
        except MemoryError as exc:
            mib = self.max_bytes >> 20
            return _failure(
                f"the template needs more than the {mib} MiB a render may use",
                template_lineno(exc),
                limit=True,
                fatal=True,
            )
        except RecursionError as exc:
            return _failure("the template recurses too deeply", template_lineno(exc))
        except Exception as exc:  # whatever a template's Python-level call raised, named
            return _failure(f"{type(exc).__name__}: {exc}", template_lineno(exc))

    def _compiled(self, source: str) -> tuple[jinja2.Template, list[str]]:
        if source in self.compiled:
            self.compiled.move_to_end(source)
            return self.compiled[source]
        variables = sorted(jinja2.meta.find_undeclared_variables(self.env.parse(source)))
        entry = (self.env.from_string(source), variables)
        self.compiled[source] = entry
        if len(self.compiled) > _CACHED_TEMPLATES:
            self.compiled.popitem(last=False)
        return entry

    def _render(self, template: jinja2.Template, context: dict[str, Any], max_chars: int) -> str:
        pieces, total = [], 0
        for piece in template.generate(**context):
            total += len(piece)
            if total > max_chars:
                raise _LimitReached(f"the rendered prompt is more than {max_chars} characters")
            pieces.append(piece)
        return "".join(pieces)


def _failure(reason: str, lineno: int | None, *, limit: bool = False, fatal: bool = False) -> dict[str, Any]:
    return {"ok": False, "reason": reason, "lineno": lineno, "limit": limit, "fatal": fatal}


def _read_frame(stream: BinaryIO) -> bytes | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None  # the parent went away
    (size,) = _HEADER.unpack(header)
    return stream.read(size)


def _write_frame(stream: BinaryIO, body: bytes) -> None:
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def _cap_memory(max_bytes: int) -> None:
    try:
        import resource
    except ImportError:  # no rlimits on this platform: time and output limits still hold
        return
    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))


def main() -> None:
    # The parent owns Ctrl-C (this process has its own session; ignoring SIGINT holds as well
    # when it is started some other way): a render is stopped by its parent, never by a signal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    max_bytes = int(sys.argv[1])
    # The protocol owns the real stdout; anything else printed goes to stderr.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    renderer = _Renderer(max_bytes)
    _cap_memory(max_bytes)
    # Ready: the caller's time limit counts from here, not from the interpreter's start-up.
    _write_frame(replies, json.dumps({"ready": True}).encode())
    while (frame := _read_frame(requests)) is not None:
        reply = renderer.handle(pickle.loads(frame))
        _write_frame(replies, json.dumps(reply).encode())
        if reply.get("fatal"):
            return  # after a MemoryError the parent starts a fresh process


if __name__ == "__main__":
    try:
        main()
    except (BrokenPipeError, KeyboardInterrupt):  # the parent went away: nothing to tell anyone
        os._exit(0)
