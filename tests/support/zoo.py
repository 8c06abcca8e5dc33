"""Tiny models built once per test session.

Many test modules ask for the same tiny checkpoint, or for the same export of
it (the 512-token Idefics3, Qwen2-VL, Qwen2-Audio, the 512-token llama).
Building a checkpoint costs transformers' set-up, exporting it costs the whole
graph build and its checks: the zoo does each once per session and hands every
module the same folder. A test that wants to change a folder copies it first:
a shared folder changed in place would leak into every later module, so the
zoo checks at the session's end that every folder it handed out is as built.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple


class ChatModel(NamedTuple):
    """A tiny chat checkpoint and its export: what media tests compare the runtime against."""

    reference: Any  # the transformers model the checkpoint was saved from
    checkpoint: Path
    folder: Path


class Zoo:
    """Checkpoints and exports keyed by what they are built from, each built on first request."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._checkpoints: dict[tuple, tuple[Any, Path]] = {}
        self._exports: dict[tuple, Path] = {}
        self._variants: dict[tuple, Path] = {}
        self._as_built: dict[Path, set] = {}

    def checkpoint(self, build: Callable, *args: Any, **options: Any) -> tuple[Any, Path]:
        """``build(folder, *args, **options)`` run once: (the transformers model it returns, folder).

        ``build`` is one of the tests' builders (``build_tiny_hf``, ``build_idefics3_chat`` ...);
        those that return ``(model, folder)`` and those that return the model alone both fit.
        """
        key = (build.__module__, build.__qualname__, args, _frozen(options))
        if key not in self._checkpoints:
            folder = self._root / f"{build.__name__}-{len(self._checkpoints)}" / "hf"
            built = build(folder, *args, **options)
            model = built[0] if isinstance(built, tuple) else built
            self._as_built[folder] = _listing(folder)
            self._checkpoints[key] = (model, folder)
        return self._checkpoints[key]

    def variant(self, checkpoint: Path, change: Callable[[Path], None]) -> Path:
        """A copy of ``checkpoint`` that ``change(copy)`` edits (a video processor, a template ...), made once.

        Copying the built folder spares building it again; the copy's weights are the
        original's, so the model ``checkpoint`` returned stays its reference.
        """
        key = (checkpoint, change.__module__, change.__qualname__)
        if key not in self._variants:
            folder = checkpoint.parent / f"variant-{len(self._variants)}" / "hf"
            shutil.copytree(checkpoint, folder)
            change(folder)
            self._as_built[folder] = _listing(folder)
            self._variants[key] = folder
        return self._variants[key]

    def export(self, checkpoint: Path, **options: Any) -> Path:
        """``clika_export.api.export(checkpoint, ..., **options)`` run once: the model folder."""
        from clika_export.api import export

        key = (checkpoint, _frozen(options))
        if key not in self._exports:
            target = checkpoint.parent / f"model-{len(self._exports)}"
            folder = export(checkpoint, target, progress=False, **options)
            self._as_built[folder] = _listing(folder)
            self._exports[key] = folder
        return self._exports[key]

    def chat_model(self, build: Callable, context_window: int = 512) -> ChatModel:
        """``build``'s checkpoint and its export with a ``context_window``-token window, each made once."""
        reference, checkpoint = self.checkpoint(build)
        return ChatModel(reference, checkpoint, self.export(checkpoint, context_window=context_window))

    def changed(self) -> list[Path]:
        """The folders handed out whose files no longer are as built (added, removed or rewritten)."""
        return [folder for folder, listing in self._as_built.items() if _listing(folder) != listing]


def _frozen(options: dict[str, Any]) -> tuple:
    return tuple(sorted((name, repr(value)) for name, value in options.items()))


def _listing(folder: Path) -> set[tuple[str, int, int]]:
    """(relative path, size, modification time) of every file under ``folder``."""
    found = set()
    for parent, _, names in os.walk(folder):
        for name in names:
            info = (Path(parent) / name).stat()
            found.add((os.path.relpath(Path(parent) / name, folder), info.st_size, info.st_mtime_ns))
    return found


@contextlib.contextmanager
def loaded(folder: Path, threads: int = 1) -> Iterator[Any]:
    """The model folder loaded (``modelverse.load``), closed on leaving."""
    from clika_runtime import modelverse

    model = modelverse.load(folder, threads=threads)
    try:
        yield model
    finally:
        model.close()
