"""An exclusive lock on a file beside the work it guards.

Two processes may fill one cache entry at once (two ``clika pull`` runs, two
test workers exporting the same checkpoint): the second waits on the lock and
then finds the entry done instead of writing it again under the first's feet.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def held_lock(lock: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock`` (created if absent) for the block's length."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
