"""The cache lock: a second process cannot take it while the first holds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from clika_export.file_lock import held_lock

TRY_LOCK = """
import fcntl, sys
with open(sys.argv[1], "a") as handle:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(3)
"""


def other_process_takes(lock: Path) -> bool:
    """Whether another process takes ``lock`` without waiting."""
    code = subprocess.run([sys.executable, "-c", TRY_LOCK, str(lock)], timeout=60).returncode
    assert code in (0, 3), f"the lock probe failed (exit {code})"
    return code == 0


def test_a_held_lock_keeps_another_process_out_until_released(tmp_path):
    lock = tmp_path / "cache" / ".entry.lock"
    with held_lock(lock):
        assert lock.is_file()  # made, with its folder, on first use
        assert not other_process_takes(lock)
    assert other_process_takes(lock)
