"""The exported model folders in the cache, found by reading their manifests.

Finding an export by its manifest (source sha256 and weight precision) needs
nothing of the export extra, so a runtime-only install finds what was pulled.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clika_runtime.contract.manifest import Manifest, ManifestError
from clika_runtime.store.cache import exports_dir
from clika_runtime.store.export_extra import puller
from clika_runtime.store.local_model import MANIFEST, PRECISIONS
from clika_runtime.store.names import all_records
from clika_runtime.store.sizes import folder_size


@dataclass(frozen=True)
class CachedExport:
    """One exported folder in the cache, as ``clika list`` shows it."""

    name: str
    precision: str
    size: int
    folder: Path
    source_sha256: str


def cached_exports() -> list[CachedExport]:
    """Every complete export in the cache, by name then precision, the newest first.

    An export is named by the pulled name recorded for its source, else by the
    catalog's name for it (with the export extra), else by its source's file name.
    Newest first: after an upgrade re-exports a model, the export a name loads (the
    current one, ``exports_of``'s order) is the one listed and shown first.
    """
    return sorted(
        _cached_exports(),
        key=lambda e: (
            e.name,
            PRECISIONS.index(e.precision) if e.precision in PRECISIONS else 9,
            -(e.folder / MANIFEST).stat().st_mtime_ns,
        ),
    )


def exports_of(source_sha256: str, precision: str) -> list[Path]:
    """The complete exports of this source at this precision, newest first."""
    found = [
        folder
        for folder, data in _export_manifests()
        if _source_sha(data) == source_sha256 and manifest_precision_of(data) == precision
    ]
    found = [folder for folder in found if is_model_folder(folder)]
    return sorted(found, key=lambda folder: (folder / MANIFEST).stat().st_mtime_ns, reverse=True)


def is_model_folder(folder: Path) -> bool:
    try:
        Manifest.read(folder)
    except ManifestError:
        return False
    return True


def manifest_precision(folder: Path) -> str:
    return manifest_precision_of(_manifest(folder))


def manifest_precision_of(data: dict[str, Any]) -> str:
    precision = data.get("precision")
    return str((precision if isinstance(precision, dict) else {}).get("weights", "fp32"))


def _cached_exports() -> Iterator[CachedExport]:
    extra = puller()
    catalog = {r.source_sha256: r.name for r in extra.known_records()} if extra is not None else {}
    recorded: dict[str, list[str]] = {}  # a source may have several names (copies)
    for record in all_records():
        recorded.setdefault(record.source_sha256, []).append(record.name)
    for folder, data in _export_manifests():
        sha = _source_sha(data)
        provenance = data.get("provenance")
        source = str((provenance if isinstance(provenance, dict) else {}).get("source", folder.name))
        size = folder_size(folder)
        for name in recorded.get(sha) or [catalog.get(sha) or Path(source).stem]:
            yield CachedExport(name, manifest_precision_of(data), size, folder, sha)


def _export_manifests() -> Iterator[tuple[Path, dict[str, Any]]]:
    exports = exports_dir()
    if not exports.is_dir():
        return
    for folder in sorted(exports.iterdir()):
        if folder.name.startswith(".") or not (folder / MANIFEST).is_file():
            continue  # a partial export in progress, or debris
        data = _manifest(folder)
        if data:  # an unreadable manifest, or JSON that is no object, is debris too
            yield folder, data


def _source_sha(data: dict[str, Any]) -> str:
    provenance = data.get("provenance")
    return str((provenance if isinstance(provenance, dict) else {}).get("source_sha256", ""))


def _manifest(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
