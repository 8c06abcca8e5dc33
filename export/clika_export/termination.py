"""SIGTERM during an export ends it like an error, so its work folder is removed.

By default SIGTERM ends the process at once, with no cleanup: an export killed
that way left its hidden ``.partial`` work folder behind. While an export runs
on the main thread of a process that kept SIGTERM's default, the signal raises
``SystemExit(143)`` instead (the code a shell reports for SIGTERM), which
unwinds through the export's cleanup.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def terminated_as_exit() -> Iterator[None]:
    """Within the block, SIGTERM raises SystemExit(128 + SIGTERM) (main thread, default handler only)."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield  # another thread, or the application handles SIGTERM itself
        return

    def exit_now(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
