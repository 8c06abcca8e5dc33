"""A pulled source's export at one precision: found in the cache, or fetched and exported once.

Both ways of pulling end here: a catalog name or a checkpoint path
(``clika_export.pull.puller``) and an ``hf://`` spec (``clika_export.pull.hub_pull``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from clika_export.api import ExportError, cache_key, cached_export
from clika_export.checkpoint import CheckpointError
from clika_export.graph.hidden_states import HiddenStatesError, ensure_hidden_states
from clika_export.pull.fetch import FetchError
from clika_runtime.store.cache import exports_dir
from clika_runtime.store.exports import exports_of, is_model_folder
from clika_runtime.store.local_model import LocalModel, ModelError, Say


def export_folder(sha256: str, precision: str) -> Path:
    """Where ``cached_export`` keeps this source at this precision (default context window)."""
    return exports_dir() / cache_key(sha256, precision, None)


def held_export(sha256: str, precision: str, pull: bool) -> Path | None:
    """The export to run: the one made on this process's compute path, or, where nothing may be
    pulled, the newest one made on another (a folder runs on every path; the kernel library and
    the fallback differ only in what its sensitivity record measured). None: neither is held."""
    folder = export_folder(sha256, precision)
    if is_model_folder(folder):
        return folder
    if pull:
        return None  # export for this path: its record is measured where it runs
    held = exports_of(sha256, precision)
    return held[0] if held else None


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
    folder = held_export(sha256, precision, pull)
    if folder is not None:
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
