"""A model store of its own for a server test: real exports linked in from the user's cache, tiny ones exported.

The user's cache keeps its exports (built once, sha256-keyed); a test's
``$CLIKA_CACHE`` links to them and records their names, so what a test pulls,
copies or deletes never reaches the user's own model list.
"""

from __future__ import annotations

import os
from pathlib import Path

from clika_export.api import cached_export, source_sha256
from clika_runtime.store.cache import exports_dir
from clika_runtime.store.names import NameRecord, write_record


def link_export(folder: Path, name: str, sha256: str, cache: Path) -> Path:
    """``folder`` (an export of the user's cache) listed in ``cache`` as ``name``."""
    exports = exports_dir(cache)
    exports.mkdir(parents=True, exist_ok=True)
    link = exports / folder.name
    if not link.exists():
        os.symlink(folder, link, target_is_directory=True)
    write_record(NameRecord(name, sha256), cache)
    return link


def export_into(source: Path, name: str, cache: Path, precision: str = "fp32") -> Path:
    """``source`` exported into ``cache`` (the test's own store) and recorded as ``name``."""
    folder = cached_export(source, precision, progress=False, cache=cache)
    write_record(NameRecord(name, source_sha256(source)), cache)
    return folder
