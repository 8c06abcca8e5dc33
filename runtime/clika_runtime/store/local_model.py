"""A resolved model folder, and the error for a model that cannot be named, pulled or removed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clika_runtime.store.sizes import folder_size

# The name the commands run when none is named (clika_export.pull.catalog.DEFAULT_MODEL, which the
# runtime cannot import; tests/runtime/store/test_store.py checks the two agree).
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
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


def checked_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ModelError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    return precision


def quiet(_text: str) -> None:
    """A ``say`` that says nothing."""
