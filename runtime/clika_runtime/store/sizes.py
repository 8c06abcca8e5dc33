"""Sizes of model folders, and bytes as people read them."""

from __future__ import annotations

from pathlib import Path


def folder_size(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (links are not followed twice)."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def human_size(size: float) -> str:
    """Bytes in decimal units (1.2 GB, 98.4 MB)."""
    if size < 1000:
        return f"{size:.0f} B"
    for unit in ("KB", "MB", "GB"):
        size /= 1000
        if size < 1000 or unit == "GB":
            break
    return f"{size:.1f} {unit}"
