"""Holding an engine between two steps, so requests posted meanwhile start in the same step.

Requests submitted one by one reach a running engine at whatever step its thread is on: on
a busy machine the first may run alone for a few steps before the next arrives. A test
that needs them together holds the engine's thread inside ``between_steps`` while it
submits and lets go once all are posted; the engine adds every posted request before its
next step. No timing decides it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

WAIT_S = 60.0


@contextlib.contextmanager
def engine_held(engine) -> Iterator[None]:
    """Inside, ``engine`` (an Engine) runs no step; requests submitted meanwhile start together."""
    holding, release = threading.Event(), threading.Event()

    def hold(_core) -> None:
        holding.set()
        if not release.wait(WAIT_S):
            raise TimeoutError("the test never let the engine go")

    holder = threading.Thread(
        target=engine.between_steps, args=(hold,), kwargs={"timeout": 2 * WAIT_S}, daemon=True
    )
    holder.start()
    if not holding.wait(WAIT_S):
        raise TimeoutError("the engine never reached the hold between its steps")
    try:
        yield
    finally:
        release.set()
        holder.join(WAIT_S)
