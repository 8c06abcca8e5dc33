"""A model name or path -> a model folder ready to load (pulled when needed and possible)."""

from __future__ import annotations

from pathlib import Path

from clika_runtime.store.export_extra import INSTALL_HINT, puller, require_puller
from clika_runtime.store.exports import exports_of, manifest_precision
from clika_runtime.store.local_model import (
    DEFAULT_PRECISION,
    MANIFEST,
    PRECISIONS,
    LocalModel,
    ModelError,
    Say,
    checked_precision,
    quiet,
)
from clika_runtime.store.names import all_records, read_record

HUB_SCHEME = "hf://"


def resolve(
    spec: str | Path,
    precision: str | None = None,
    *,
    pull: bool = True,
    say: Say | None = None,
    progress: bool = True,
) -> LocalModel:
    """The model folder for ``spec`` at ``precision`` (None: an exported folder's own, else int4).

    ``spec``: an exported model folder (used where it lies), a ``.gguf`` file or
    Hugging Face folder, a catalog name or an ``hf://`` spec. What is not
    exported yet is pulled (fetched, verified, exported) when ``pull`` is True
    and the export extra is installed; ModelError otherwise, naming what to do.
    """
    say = say or quiet
    spec = str(spec)
    path = Path(spec).expanduser()
    if not spec.startswith(HUB_SCHEME) and path.exists():
        if (path / MANIFEST).is_file():
            return _exported_folder(path, precision)
        extra = require_puller(f"{path} is a checkpoint, not an exported model folder; exporting it")
        return extra.pull(str(path), precision, pull=pull, say=say, progress=progress)
    if _looks_like_path(spec):
        raise ModelError(f"{spec} does not exist (and it is not a catalog name)")
    precision = checked_precision(precision or DEFAULT_PRECISION)
    extra = puller()
    if extra is not None and (extra.can_pull(spec) or read_record(spec) is None):
        return extra.pull(spec, precision, pull=pull, say=say, progress=progress)
    return _pulled_before(
        spec, precision, extra is not None
    )  # a runtime-only install, or a name the catalog no longer has


def _looks_like_path(spec: str) -> bool:
    if spec.startswith(HUB_SCHEME):
        return False
    return "/" in spec or spec.startswith((".", "~")) or spec.lower().endswith(".gguf")


def _exported_folder(path: Path, precision: str | None) -> LocalModel:
    own = manifest_precision(path)
    if precision is not None and precision != own:
        raise ModelError(f"{path} is an exported {own} model; --precision {precision} does not apply to it")
    return LocalModel(path.name, path, own, in_place=True)


def _pulled_before(name: str, precision: str, can_pull: bool) -> LocalModel:
    """A name pulled earlier: its record and an export at ``precision`` (all a runtime-only install has)."""
    hint = "" if can_pull else f"; pulling it needs the export extra ({INSTALL_HINT})"
    record = read_record(name)
    if record is None:
        pulled = sorted(r.name for r in all_records())
        listed = f"pulled models: {', '.join(pulled)}" if pulled else "no model is pulled yet"
        raise ModelError(f"{name!r} is neither an existing path nor a pulled model ({listed}){hint}")
    folders = exports_of(record.source_sha256, precision)
    if not folders:
        held = sorted({p for p in PRECISIONS if exports_of(record.source_sha256, p)})
        have = f"it is pulled at {', '.join(held)}" if held else "none of its exports is left"
        raise ModelError(f"{name} is not pulled at {precision} ({have}){hint}")
    return LocalModel(name, folders[0], precision)
