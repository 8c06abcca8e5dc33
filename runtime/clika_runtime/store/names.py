"""What each pulled name stands for: ``names/<quoted name>.json``.

A pull records the name's source sha256 (the key its exports are found by)
and the downloads it left in the cache (removed with the name's last export),
so resolving, listing and removing by name need no catalog and no network.
Records are untrusted input: a damaged one reads as absent. Each is written
to a temporary file and renamed into place.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clika_runtime.store.cache import cache_root, names_dir

_SUFFIX = ".json"


@dataclass(frozen=True)
class NameRecord:
    name: str
    source_sha256: str
    # Cache-relative paths of what the pull downloaded (blobs, links, Hub snapshots); the source first.
    downloads: tuple[str, ...] = ()
    # Where it came from (a Hub repository's commit and each file's sha256, ...), as JSON values.
    origin: dict[str, Any] = field(default_factory=dict)


def record_path(name: str, cache: Path | None = None) -> Path:
    return names_dir(cache) / (urllib.parse.quote(name, safe="") + _SUFFIX)


def write_record(record: NameRecord, cache: Path | None = None) -> None:
    """Record (or replace) what ``record.name`` stands for."""
    path = record_path(record.name, cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "name": record.name,
        "source_sha256": record.source_sha256,
        "downloads": list(record.downloads),
        "origin": record.origin,
    }
    handle, staged = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(body, out, indent=1)
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise


def read_record(name: str, cache: Path | None = None) -> NameRecord | None:
    return _parse(record_path(name, cache))


def all_records(cache: Path | None = None) -> list[NameRecord]:
    folder = names_dir(cache)
    if not folder.is_dir():
        return []
    records = (_parse(path) for path in sorted(folder.glob("*" + _SUFFIX)) if not path.name.startswith("."))
    return [record for record in records if record is not None]


def remove_record(name: str, cache: Path | None = None) -> None:
    record_path(name, cache).unlink(missing_ok=True)


def safe_download_path(relative: str, cache: Path | None = None) -> Path | None:
    """A recorded download inside the cache, or None for one that would point outside it."""
    root = (cache or cache_root()).resolve()
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or ".." in parts:
        return None
    return root.joinpath(*parts)


def _parse(path: Path) -> NameRecord | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        name, sha = data["name"], data["source_sha256"]
        downloads = tuple(str(d) for d in data.get("downloads", ()))
        origin = data.get("origin") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if (
        not isinstance(name, str)
        or not isinstance(sha, str)
        or not name
        or not sha
        or not isinstance(origin, dict)
    ):
        return None
    return NameRecord(name, sha, downloads, origin)
