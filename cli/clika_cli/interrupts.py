"""Ctrl-C while a reply runs: a flag the reply's loop checks, never an exception.

A ``KeyboardInterrupt`` lands wherever the main thread happens to be (inside
a queue's lock, a render's wait, a generator's cleanup) and can be swallowed
or leave a traceback. And the kernel hands a process's SIGINT to any of its
threads (the engine's, ONNX Runtime's, the tokenizer's): one taken by another
thread only flags the main thread, which sleeps on in its wait for the next
token. So :func:`run_interruptibly` runs the reply on a helper thread while the
main thread waits in ``select`` on the signal wakeup descriptor, which every
SIGINT writes to whichever thread takes it. There the handler records the
interrupt and calls ``stop`` (it posts a cancel, so a reply waiting for its next
token wakes when the engine ends the request); the reply's loop checks
:attr:`ReplyInterrupt.happened` after every piece.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from clika_runtime.park_points import release

T = TypeVar("T")


class ReplyInterrupt:
    """Ctrl-C sets :attr:`happened` and calls ``stop``, while :func:`run_interruptibly` runs."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self._stop = stop
        self._event = threading.Event()

    @property
    def happened(self) -> bool:
        return self._event.is_set()

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self._event.set()
        self._stop()
        release()  # an interrupt test's parked process goes on only now


def run_interruptibly(work: Callable[[ReplyInterrupt], T], stop: Callable[[], None]) -> T:
    """``work(interrupt)`` on a helper thread, Ctrl-C meanwhile handled as the module says; its
    result, or its exception raised here."""
    interrupt = ReplyInterrupt(stop)
    outcome: dict[str, Any] = {}
    done_r, done_w = os.pipe()
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)

    def run() -> None:
        try:
            outcome["result"] = work(interrupt)
        except BaseException as exc:  # handed to the main thread as it is
            outcome["error"] = exc
        finally:
            os.write(done_w, b"x")

    previous_handler = signal.signal(signal.SIGINT, interrupt.handle)
    previous_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        helper = threading.Thread(target=run, name="clika-reply", daemon=True)
        helper.start()
        while done_r not in select.select([done_r, wake_r], [], [])[0]:
            _drain(wake_r)  # a signal: its handler runs now, on this thread
        helper.join()
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        signal.signal(signal.SIGINT, previous_handler)
        for fd in (done_r, done_w, wake_r, wake_w):
            os.close(fd)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
