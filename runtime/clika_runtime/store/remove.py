"""Removing a model's exports from the cache, and with the last of them its downloads and name."""

from __future__ import annotations

import shutil
from pathlib import Path

from clika_runtime.store.cache import cache_root
from clika_runtime.store.export_extra import puller, require_puller
from clika_runtime.store.exports import CachedExport, cached_exports
from clika_runtime.store.local_model import MANIFEST, ModelError, Say, checked_precision, quiet
from clika_runtime.store.names import (
    NameRecord,
    all_records,
    read_record,
    record_path,
    remove_record,
    safe_download_path,
)
from clika_runtime.store.resolve import HUB_SCHEME
from clika_runtime.store.sizes import folder_size, human_size


def remove(spec: str, precision: str | None = None, say: Say | None = None) -> list[Path]:
    """Delete the cached exports of ``spec`` (one precision, or all); with all of them, its downloads too."""
    say = say or quiet
    if precision is not None:
        checked_precision(precision)
    record = _record(spec)
    sha = record.source_sha256 if record else _checkpoint_sha(spec)
    if record is not None and precision is None and _other_names(record):
        remove_record(record.name)  # a copy (or the original of one): the exports stay for the other names
        say(f"removed the name {record.name}; its exports stay for {', '.join(_other_names(record))}")
        return [record_path(record.name)]
    doomed = [
        e
        for e in cached_exports()
        if (e.source_sha256 == sha if sha else e.name == spec) and precision in (None, e.precision)
    ]
    removed = [_remove_export(export, say) for export in doomed]
    if precision is None and record is not None:
        removed += _remove_downloads(record, say)
        remove_record(record.name)
    if not removed:
        which = f" at {precision}" if precision else ""
        raise ModelError(f"{spec}{which} is not in the cache (see `clika list`)")
    return removed


def _other_names(record: NameRecord) -> list[str]:
    """The other recorded names of ``record``'s source."""
    return sorted(
        r.name for r in all_records() if r.source_sha256 == record.source_sha256 and r.name != record.name
    )


def _record(spec: str) -> NameRecord | None:
    """What a pulled name stands for: its own record, else the catalog's entry (pulled before records)."""
    record = read_record(spec)
    if record is not None:
        return record
    extra = puller()
    known = {r.name: r for r in extra.known_records()} if extra is not None else {}
    return known.get(spec)


def _checkpoint_sha(spec: str) -> str | None:
    """The sha256 a checkpoint path is cached under (None: not a path; match exports by name)."""
    path = Path(spec).expanduser()
    if spec.startswith(HUB_SCHEME) or not path.exists():
        return None
    if (path / MANIFEST).is_file():
        raise ModelError(f"{path} is an exported folder outside the cache's care; delete it yourself")
    return require_puller(f"finding the exports of the checkpoint {path}").source_sha256(path)


def _remove_export(export: CachedExport, say: Say) -> Path:
    if export.folder.is_symlink():  # an entry linked into the cache: the link goes, never what it points to
        target = export.folder.readlink()
        export.folder.unlink()
        say(f"removed the link {export.folder} (to {target}, which stays)")
        return export.folder
    shutil.rmtree(export.folder)
    say(f"removed {export.name} {export.precision} ({human_size(export.size)}) {export.folder}")
    return export.folder


def _remove_downloads(record: NameRecord, say: Say) -> list[Path]:
    removed = []
    for relative in record.downloads:
        path = safe_download_path(relative)
        if path is None or not (path.exists() or path.is_symlink()):
            continue
        if path.is_symlink() or path.is_file():
            size = 0 if path.is_symlink() else path.stat().st_size
            path.unlink()
        else:
            size = folder_size(path)
            shutil.rmtree(path, ignore_errors=True)
        if size:
            say(f"removed the download of {record.name} ({human_size(size)}) {path}")
        removed.append(path)
        _prune_empty_parents(path)
    return removed


def _prune_empty_parents(path: Path) -> None:
    """Remove the folders a download leaves empty, up to (not including) the cache's top level."""
    root = cache_root().resolve()
    folder = path.parent
    while folder != root and folder.parent != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (or not ours to remove): stop here
        folder = folder.parent
