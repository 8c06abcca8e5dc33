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

import time
from collections.abc import Callable
from pathlib import Path

from clika_export.api import ExportError, cache_key, cached_export
from clika_export.api import source_sha256 as _source_sha256
from clika_export.catalog import CATALOG, GGUF, CatalogItem, names
from clika_export.checkpoint import CheckpointError
from clika_export.families import supported
from clika_export.fetch import FetchError, blob_path, fetch_gguf
from clika_export.graph.hidden_states import HiddenStatesError, ensure_hidden_states
from clika_export.readers.hf import is_hf_folder
from clika_runtime.store.cache import exports_dir
from clika_runtime.store.exports import is_model_folder
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
            from clika_export.hub_pull import pull_from_hub
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
    from clika_export.checkpoint import CheckpointError

    try:
        return _source_sha256(path)
    except CheckpointError as exc:
        raise ModelError(str(exc)) from None


def export_folder(sha256: str, precision: str) -> Path:
    """Where ``cached_export`` keeps this source at this precision (default context window)."""
    return exports_dir() / cache_key(sha256, precision, None)


def export_pulled(
    name: str,
    sha256: str,
    precision: str,
    pull: bool,
    say: Say,
    progress: bool,
    fetch: Callable[[], Path] | None,
    source: Path | None = None,
) -> LocalModel:
    """``name``'s export at ``precision``: found in the cache, or fetched (``fetch``) and exported."""
    folder = export_folder(sha256, precision)
    if is_model_folder(folder):
        _add_hidden_states(folder)
        return LocalModel(name, folder, precision)
    if not pull:
        raise ModelError(
            f"{name} ({precision}) is not pulled yet: run `clika pull {name} --precision {precision}`"
        )
    began = time.perf_counter()
    say(f"pulling {name} ({precision})")
    if fetch is not None:
        try:
            source = fetch()
        except FetchError as exc:
            raise ModelError(f"cannot fetch {name}: {exc}") from None
    step = "[2/2] " if fetch is not None else ""
    say(f"{step}export to {precision}: read, build the graph, quantize, verify, write")
    assert source is not None
    try:
        folder = cached_export(source, precision, progress=progress, sha256=sha256)
    except (ExportError, CheckpointError) as exc:
        raise ModelError(f"cannot export {name}: {exc}") from None
    return LocalModel(name, folder, precision, pulled_now=True, seconds=time.perf_counter() - began)


def _add_hidden_states(folder: Path) -> None:
    """Exported before embeddings: give its graphs the hidden_states output (about a second).

    Best effort: a folder that cannot take it (read-only, a graph of another
    head) still loads, and embedding on it names the fix.
    """
    try:
        ensure_hidden_states(folder)
    except (OSError, HiddenStatesError):
        pass


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
