"""The fallback cache's size bound: least recently used entries go first.

Every folder loaded without the kernel library leaves a rewritten copy of its
weights in ``$CLIKA_CACHE/fallback`` (about the folder's size), and an edited or
re-exported folder gets a new entry, so without a bound the cache only grows.
After each new entry the oldest ones (by last use: a read touches its index) are
removed until the rest fit ``CLIKA_FALLBACK_CACHE_BYTES`` (default 8 GiB). The
entry just written is always kept, even when it alone is larger. Removing an
entry another process has mapped is safe on POSIX: its pages stay until unmapped.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger("clika_runtime.kernels")
BUDGET_ENV = "CLIKA_FALLBACK_CACHE_BYTES"
DEFAULT_BUDGET = 8 << 30
INDEX = "index.json"


def budget_bytes() -> int:
    """The bound in bytes: the environment's where it is a whole number >= 0, else the default."""
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if raw.isdigit():
        return int(raw)
    if raw:
        log.warning(
            "%s=%r is not a whole number of bytes: the default %d is used", BUDGET_ENV, raw, DEFAULT_BUDGET
        )
    return DEFAULT_BUDGET


def mark_used(entry: Path) -> None:
    """Record a read of ``entry`` (its index's modification time), so it counts as recent."""
    try:
        os.utime(entry / INDEX)
    except OSError:
        pass  # a read-only cache still serves its entries; they only age


def prune(root: Path, keep: Path, budget: int | None = None) -> list[Path]:
    """Remove the least recently used entries of ``root`` (never ``keep``) until the rest fit the
    budget; the entries removed."""
    budget = budget_bytes() if budget is None else budget
    entries = sorted(_entries(root), key=lambda item: item[1])  # oldest use first
    total = sum(size for _, _, size in entries)
    removed = []
    for entry, _, size in entries:
        if total <= budget:
            break
        if entry == keep:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        total -= size
        removed.append(entry)
    if removed:
        log.info("fallback cache: %d old entries removed to fit %d bytes", len(removed), budget)
    return removed


def _entries(root: Path) -> list[tuple[Path, float, int]]:
    """(entry, last use, bytes) of each finished entry (partial ones start with a dot)."""
    found = []
    for entry in root.iterdir() if root.is_dir() else ():
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            used = (entry / INDEX).stat().st_mtime
            size = sum(path.stat().st_size for path in entry.iterdir() if path.is_file())
        except OSError:
            continue  # removed by another process meanwhile, or not an entry
        found.append((entry, used, size))
    return found
