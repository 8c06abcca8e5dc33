"""Pulling a model into the store: fetch (catalog or Hub), verify, export once per precision.

The runtime's store (``clika_runtime.store``) finds this module when a name
is not exported yet or a checkpoint path must be hashed; it calls ``pull``,
``can_pull``, ``known_records`` and ``source_sha256``. Exports go through
``clika_export.api.cached_export`` (keyed by the source's sha256 and the
export options), so a second pull finds the folder and does nothing; each
pulled name is recorded (``clika_runtime.store.names``) so a runtime-only
install finds it again.
"""

from __future__ import annotations

from pathlib import Path

from clika_export.api import source_sha256 as _source_sha256
from clika_export.checkpoint import CheckpointError
from clika_export.families import supported
from clika_export.pull.catalog import CATALOG, GGUF, CatalogItem, names
from clika_export.pull.fetch import blob_path, fetch_gguf
from clika_export.pull.pulled_export import export_pulled
from clika_export.readers.hf import is_hf_folder
from clika_runtime.store.local_model import (
    DEFAULT_PRECISION,
    MANIFEST,
    LocalModel,
    ModelError,
    Say,
    checked_precision,
)
from clika_runtime.store.names import NameRecord, read_record, write_record
from clika_runtime.store.resolve import HUB_SCHEME


def pull(spec: str, precision: str | None, *, pull: bool, say: Say, progress: bool) -> LocalModel:
    """The model folder for a checkpoint path, a catalog name or an ``hf://`` spec, pulled if ``pull``."""
    if spec.startswith(HUB_SCHEME):
        try:
            from clika_export.pull.hub_pull import pull_from_hub
        except ImportError as exc:
            raise ModelError(
                f"{spec}: models from the Hub need huggingface_hub (pip install 'clika-runtime[export]'): {exc}"
            ) from None
        return pull_from_hub(spec, checked_precision(precision or DEFAULT_PRECISION), pull, say, progress)
    path = Path(spec).expanduser()
    if path.exists():
        return _pull_path(path, precision, pull, say, progress)
    return _pull_catalog_name(spec, checked_precision(precision or DEFAULT_PRECISION), pull, say, progress)


def can_pull(name: str) -> bool:
    """Whether ``name`` is something this module can fetch: a catalog model or an ``hf://`` spec."""
    return name.startswith(HUB_SCHEME) or name in CATALOG


def known_records() -> list[NameRecord]:
    """The catalog's models as name records (so exports pulled before records existed keep their names)."""
    return [_catalog_record(item) for item in CATALOG.values() if item.kind == GGUF and item.sha256]


def source_sha256(path: str | Path) -> str:
    """The sha256 a checkpoint's exports are keyed by (a folder digest for Hugging Face folders);
    an unreadable checkpoint (a FIFO or device among its files) is a ModelError."""

    try:
        return _source_sha256(path)
    except CheckpointError as exc:
        raise ModelError(str(exc)) from None


def _pull_path(path: Path, precision: str | None, pull: bool, say: Say, progress: bool) -> LocalModel:
    if not (is_hf_folder(path) or (path.is_file() and path.suffix.lower() == ".gguf")):
        raise ModelError(
            f"{path} is neither an exported model folder ({MANIFEST}), a Hugging Face folder (config.json) "
            "nor a .gguf file"
        )
    precision = checked_precision(precision or DEFAULT_PRECISION)
    say(f"hashing {path.name} ...")
    sha256 = source_sha256(path)
    name = path.stem if path.is_file() else path.name
    return export_pulled(name, sha256, precision, pull, say, progress, fetch=None, source=path)


def _pull_catalog_name(name: str, precision: str, pull: bool, say: Say, progress: bool) -> LocalModel:
    item = CATALOG.get(name)
    if item is None:
        raise ModelError(
            f"unknown model {name!r}: neither a catalog name, an hf:// spec nor an existing path "
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
        if blob_path(item.sha256).is_file():
            say(
                f"[1/2] fetch: {item.file_name} is already in the cache (sha256 {item.sha256[:12]}, verified)"
            )
        else:
            say(f"[1/2] fetch: download, assemble and verify {item.file_name} ({item.size / 1e6:.0f} MB)")
        return fetch_gguf(item, progress=progress)

    assert item.sha256 is not None
    local = export_pulled(name, item.sha256, precision, pull, say, progress, fetch=fetch)
    record = _catalog_record(item)
    if read_record(name) != record:  # recorded once, for a runtime-only install's sake
        write_record(record)
    return local


def _catalog_record(item: CatalogItem) -> NameRecord:
    assert item.sha256 is not None
    return NameRecord(
        item.name, item.sha256, downloads=(f"blobs/sha256/{item.sha256}", f"by-name/{item.name}")
    )
