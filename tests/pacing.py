"""Slowing a model's engine steps so a test's cancel lands before its request ends.

A tiny model makes a token in well under a millisecond, so on a fast machine
a 64-token reply can finish between a test reading its first piece and closing
the stream. Pacing every step makes "cancel mid-reply" true however fast the
machine is, without any timed assertion.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from clika_runtime.engine.stages import StageEvent


@contextlib.contextmanager
def paced_steps(model, seconds: float = 0.02) -> Iterator[None]:
    """Sleep ``seconds`` after every engine step of ``model`` (a GenerativeModel) while inside."""

    def pause_after_step(event: StageEvent) -> None:
        if event.stage == "step":
            time.sleep(seconds)

    model.set_stage_observer(pause_after_step)
    try:
        yield
    finally:
        model.set_stage_observer(None)
