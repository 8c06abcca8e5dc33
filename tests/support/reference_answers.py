"""transformers' answers about a real GGUF, kept on disk so a rerun loads no reference model.

Loading transformers' float32 model from a GGUF and decoding with it on one
thread is most of what the real-model checks cost (minutes for Qwen2.5-0.5B).
Its answers depend only on the file, the transformers and torch versions and
the question, so they are kept in the test cache (``tests/references`` under
the downloads), one ``.npy`` per question, keyed by all of those. Only a miss
computes; a different file, an upgraded transformers or torch, or another
question asks transformers again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from clika_export.readers.regular_file import file_sha256
from clika_runtime.store.cache import cache_root

FOLDER = Path("tests") / "references"


@functools.lru_cache(maxsize=8)
def gguf_sha256(path: Path) -> str:
    """The file's sha256, hashed once a session (the multi-GiB files take seconds)."""
    return file_sha256(path)


class ReferenceAnswers:
    """The answers of transformers' reference for one GGUF file."""

    def __init__(self, gguf: Path) -> None:
        versions = f"transformers-{version('transformers')}-torch-{version('torch')}"
        self.folder = cache_root() / FOLDER / gguf_sha256(gguf.resolve()) / versions

    def recall(self, question: str, arguments: object, compute: Callable[[], object]) -> np.ndarray:
        """The kept array answering ``question`` on ``arguments`` (JSON-able), ``compute``d on a miss."""
        path = self._path(question, arguments, ".npy")
        if not path.is_file():
            self._keep(path, lambda stream: np.save(stream, np.asarray(compute())))
        return np.load(path)

    def recall_json(self, question: str, arguments: object, compute: Callable[[], object]) -> Any:
        """The kept JSON value answering ``question`` on ``arguments``, ``compute``d on a miss."""
        path = self._path(question, arguments, ".json")
        if not path.is_file():
            self._keep(path, lambda stream: stream.write(json.dumps(compute()).encode()))
        return json.loads(path.read_bytes())

    def _path(self, question: str, arguments: object, suffix: str) -> Path:
        asked = json.dumps([question, arguments], separators=(",", ":"))
        return self.folder / f"{question}-{hashlib.sha256(asked.encode()).hexdigest()[:32]}{suffix}"

    def _keep(self, path: Path, write: Callable[[BinaryIO], object]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        with partial.open("wb") as stream:
            write(stream)
        partial.replace(path)  # whole or absent: an interrupted run leaves no half answer
