"""Park points: a test holds a process at a named place until its Ctrl-C handler releases it.

An interrupt test must make the interrupt arrive while the process waits at a
given place (the first token, between tokens, inside the template render, a tool call),
whatever the machine's load. With ``CLIKA_PARK=POINT:FIFO`` set, ``park(POINT)``
prints ``[parked at POINT]`` on stderr and blocks until one byte arrives on the
named pipe FIFO; ``release()`` writes that byte (the command's SIGINT handler
calls it once it has recorded the interrupt). So the test waits for the line,
sends Ctrl-C, and the process goes on only after the interrupt was taken.
Unset (always, outside tests), ``park`` costs one environment lookup.
"""

from __future__ import annotations

import os
import sys

__all__ = ["StepParks", "park", "parked_point", "release", "step_parks"]

_VARIABLE = "CLIKA_PARK"


def _setting() -> tuple[str, str] | None:
    value = os.environ.get(_VARIABLE, "")
    point, _, fifo = value.partition(":")
    return (point, fifo) if point and fifo else None


def parked_point() -> str | None:
    """The point this process parks at (None: none)."""
    setting = _setting()
    return setting[0] if setting else None


def park(point: str) -> None:
    """Block here until released, when this is the point ``CLIKA_PARK`` names."""
    setting = _setting()
    if setting is None or setting[0] != point:
        return
    # Read-write: the open never waits for a writer, and the read sees no end of file.
    fd = os.open(setting[1], os.O_RDWR)
    try:
        print(f"[parked at {point}]", file=sys.stderr, flush=True)
        os.read(fd, 1)
    finally:
        os.close(fd)


def release() -> None:
    """Let a parked process (this one or a helper) go on; nothing when none is parked."""
    setting = _setting()
    if setting is None:
        return
    try:
        fd = os.open(setting[1], os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader: nothing is parked
        return
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


# Engine steps a request's park point is reached at: after the first step its first token
# is sampled but not handed over yet; after the third, two tokens were.
_STEP_POINTS = {"first-token": 1, "between-tokens": 3}


class StepParks:
    """A stage observer that parks the engine's thread at the step ``CLIKA_PARK`` names, in each
    request (one request at a time: a request's end starts the count again)."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.at_step = _STEP_POINTS[point]
        self.steps = 0

    def __call__(self, event: object) -> None:
        stage = getattr(event, "stage", "")
        if stage == "detokenize":  # the request ended
            self.steps = 0
        elif stage == "step":
            self.steps += 1
            if self.steps == self.at_step:
                park(self.point)


def step_parks() -> StepParks | None:
    """The observer a command sets on its model when ``CLIKA_PARK`` names an engine step."""
    point = parked_point()
    return StepParks(point) if point in _STEP_POINTS else None
