"""The models a server can serve, as the store lists them, and how a request's name finds one.

Each cached export is one entry: its pulled name for the default precision
(int4, else the only one there is) and ``name:precision`` for every other
precision, so Ollama clients see tags (``smollm2-135m-instruct:int8``) and
``name:latest`` finds the plain name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clika_runtime.store import DEFAULT_PRECISION, cached_exports

LATEST = ":latest"


@dataclass(frozen=True)
class ModelEntry:
    """A servable model: the name clients call it by, its folder, precision, bytes on disk, mtime."""

    name: str
    folder: Path
    precision: str
    size: int
    modified: float
    pinned: bool = False  # handed to the server loaded: never unloaded, not in the store


def store_entries() -> list[ModelEntry]:
    """Every complete export in the model store, named as the module's note says."""
    exports = cached_exports()
    by_name: dict[str, list] = {}
    for export in exports:
        by_name.setdefault(export.name, []).append(export)
    entries: dict[str, ModelEntry] = {}
    for name, held in by_name.items():
        plain = next((e for e in held if e.precision == DEFAULT_PRECISION), held[0])
        for export in held:
            shown = name if export.precision == plain.precision else f"{name}:{export.precision}"
            modified = (export.folder / "manifest.json").stat().st_mtime
            known = entries.get(shown)
            if known is None or known.modified < modified:  # two exports of one name: the newest serves
                entries[shown] = ModelEntry(shown, export.folder, export.precision, export.size, modified)
    return list(entries.values())


def find_entry(entries: Sequence[ModelEntry], requested: str) -> ModelEntry | None:
    """The entry ``requested`` names: exactly, or without Ollama's default ``:latest`` tag."""
    wanted = requested.removesuffix(LATEST) if requested.endswith(LATEST) else requested
    for entry in entries:
        if entry.name in (requested, wanted):
            return entry
    return None


def tagged(name: str) -> str:
    """``name`` as Ollama shows it: with a tag (``:latest`` when it has none)."""
    return name if ":" in name else name + LATEST
