"""Bounded template work: compile and render chat templates in a separate process, with limits.

A chat template is code from the checkpoint. jinja2's sandbox keeps it away
from Python internals, but not from the CPU or memory: a template can loop
10^10 times, recurse, or allocate gigabytes (some of it while compiling, when
jinja folds constant expressions). So templates run in a render process
(``clika_runtime.chat.templates.worker``) started once and reused:

* time: the caller waits at most ``RenderLimits.seconds`` for a reply, then the
  process is killed (a fresh one serves the next render);
* memory: the process's address space is capped at ``RenderLimits.max_bytes``;
* output: a render longer than ``RenderLimits.max_chars`` stops there.

Going past a limit raises :class:`TemplateLimitError`; any other failure of the
template raises :class:`TemplateError`. Both calls block the calling thread
while waiting (the GIL is released): an event loop calls them off the loop.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clika_runtime.chat.templates.errors import TemplateError, TemplateLimitError

__all__ = [
    "MAX_SOURCE_CHARS",
    "RenderLimits",
    "TemplateError",
    "TemplateLimitError",
    "compile_template",
    "render_template",
]

# Real chat templates are a few to a few tens of kilobytes.
MAX_SOURCE_CHARS = 1_000_000
_HEADER = struct.Struct(">I")
# How long a fresh render process may take to start (an interpreter importing jinja2).
STARTUP_SECONDS = 120.0


@dataclass(frozen=True)
class RenderLimits:
    """How long a compile or render may take, how long its text may be, how much memory it may use."""

    seconds: float = 5.0
    max_chars: int = 16_000_000
    max_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.max_chars < 1 or self.max_bytes < 64 << 20:
            raise ValueError(f"render limits out of range: {self}")


DEFAULT_LIMITS = RenderLimits()


def compile_template(
    source: str, *, name: str = "chat template", limits: RenderLimits = DEFAULT_LIMITS
) -> frozenset[str]:
    """Compile ``source`` in the render process; the variables it reads from its context."""
    if not isinstance(source, str) or not source.strip():
        raise TemplateError("the template is empty", name=name)
    if len(source) > MAX_SOURCE_CHARS:
        raise TemplateError(
            f"the template has {len(source)} characters, more than {MAX_SOURCE_CHARS}", name=name
        )
    reply = _process(limits.max_bytes).call({"op": "compile", "source": source}, limits.seconds, name)
    return frozenset(reply["variables"])


def render_template(
    source: str,
    context: dict[str, Any],
    *,
    name: str = "chat template",
    limits: RenderLimits = DEFAULT_LIMITS,
) -> str:
    """``source`` rendered with ``context`` (plain data only) in the render process, within ``limits``."""
    request = {"op": "render", "source": source, "context": context, "max_chars": limits.max_chars}
    return _process(limits.max_bytes).call(request, limits.seconds, name)["text"]


class _RenderProcess:
    """One render process, restarted when it is killed or dies; one request at a time."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = os.getpid()

    def call(self, request: dict[str, Any], seconds: float, name: str) -> dict[str, Any]:
        body = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            proc = self._running()
            try:
                proc.stdin.write(_HEADER.pack(len(body)) + body)
                proc.stdin.flush()
                reply = json.loads(_read_frame(proc.stdout.fileno(), time.monotonic() + seconds))
            except TimeoutError:
                self.stop()
                raise TemplateLimitError(
                    f"compiling or rendering took longer than {seconds:g} s (does the template loop?)",
                    name=name,
                ) from None
            except (OSError, EOFError):
                self.stop()
                raise TemplateError("the template crashed its render process", name=name) from None
            except BaseException:  # a KeyboardInterrupt mid-wait: its reply would answer the next call
                self.stop()
                raise
            if reply.get("fatal"):
                self.stop()
        if not reply["ok"]:
            kind = TemplateLimitError if reply["limit"] else TemplateError
            raise kind(reply["reason"], reply["lineno"], name)
        return reply

    def _running(self) -> subprocess.Popen[bytes]:
        if self._owner != os.getpid():  # a forked child never shares its parent's process
            self._proc, self._owner = None, os.getpid()
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    *_SAFE_PATH,
                    "-m",
                    "clika_runtime.chat.templates.worker",
                    str(self.max_bytes),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=_worker_environment(),
                # Its own session: a Ctrl-C in the terminal goes to the command, never to the
                # render process (which would die mid-render, printing a traceback).
                start_new_session=True,
            )
            self._await_ready(self._proc)
        return self._proc

    def _await_ready(self, proc: subprocess.Popen[bytes]) -> None:
        """Wait for a new process's ready frame, so its start-up (an interpreter and jinja2,
        seconds on a busy machine) never counts against a render's time limit."""
        try:
            json.loads(_read_frame(proc.stdout.fileno(), time.monotonic() + STARTUP_SECONDS))
        except (TimeoutError, OSError, EOFError):
            self.stop()
            raise TemplateError(f"the render process did not start within {STARTUP_SECONDS:g} s") from None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and self._owner == os.getpid():
            proc.kill()
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()


# -P: the render process does not import modules from the working directory.
_SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()


def _worker_environment() -> dict[str, str]:
    """This process's environment, with clika_runtime importable however it was found here."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _read_frame(fd: int, deadline: float) -> bytes:
    header = _read_exactly(fd, _HEADER.size, deadline)
    return _read_exactly(fd, _HEADER.unpack(header)[0], deadline)


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    chunks, missing = [], size
    while missing:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError
        chunk = os.read(fd, min(missing, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


_PROCESSES: dict[int, _RenderProcess] = {}
_PROCESSES_LOCK = threading.Lock()


def _process(max_bytes: int) -> _RenderProcess:
    with _PROCESSES_LOCK:
        if max_bytes not in _PROCESSES:
            _PROCESSES[max_bytes] = _RenderProcess(max_bytes)
        return _PROCESSES[max_bytes]


@atexit.register
def _stop_all() -> None:
    for process in list(_PROCESSES.values()):
        process.stop()
