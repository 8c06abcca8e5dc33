"""What ``load()`` opens: a model folder as given, or the folder a name, Hub spec or checkpoint resolves to."""

from __future__ import annotations

import sys
from pathlib import Path

from clika_runtime.store.local_model import MANIFEST
from clika_runtime.store.resolve import HUB_SCHEME, resolve

_HF_CONFIG = "config.json"


def folder_to_load(spec: str | Path) -> Path:
    """The model folder ``load(spec)`` opens.

    An existing path that is not a checkpoint is returned as it is (opening it
    names what is wrong with it); a catalog name, an ``hf://`` spec, a ``.gguf``
    file or a Hugging Face folder goes through the store at its default
    precision (int4), pulled on first use when the export extra is installed,
    with status lines and progress on stderr.
    """
    path = Path(spec).expanduser()
    if not str(spec).startswith(HUB_SCHEME) and path.exists() and not _is_checkpoint(path):
        return path
    return resolve(str(spec), say=_on_stderr).folder


def _is_checkpoint(path: Path) -> bool:
    if path.is_file():
        return path.suffix.lower() == ".gguf"
    return (path / _HF_CONFIG).is_file() and not (path / MANIFEST).is_file()


def _on_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
