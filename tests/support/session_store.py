"""The test session's own model store, so the suite never adds to the user's.

``$CLIKA_CACHE`` points at a fresh folder for the whole session: exports, pulled
names, conversations, fallback graphs and Hub downloads land there and go with
it, so ``clika list`` shows after the suite what it showed before. Only the
verified downloads (``blobs/``, ``trees/``, their ``by-name/`` links and the
``partial/`` files of an interrupted fetch) are shared with the cache the
session started with: they are content-addressed, listed by no command, and
sharing them spares a real-model check its download on every run.

Exports of real models are then built once per session; ``$CLIKA_TEST_STORE``
names a folder to use as the store instead, kept between runs (its exports too)
and still apart from the user's.
"""

from __future__ import annotations

from pathlib import Path

from clika_runtime.store.cache import cache_root

SHARED_DOWNLOADS = ("blobs", "trees", "by-name", "partial")
KEPT_STORE_ENV = "CLIKA_TEST_STORE"


def session_store(folder: Path, downloads: Path | None = None) -> Path:
    """A store in ``folder`` whose download folders are those of ``downloads`` (default: the cache now)."""
    downloads = downloads or cache_root()
    folder.mkdir(parents=True, exist_ok=True)
    for name in SHARED_DOWNLOADS:
        (downloads / name).mkdir(parents=True, exist_ok=True)
        if not (folder / name).is_symlink():  # a kept store (``$CLIKA_TEST_STORE``) has them already
            (folder / name).symlink_to(downloads / name, target_is_directory=True)
    return folder
