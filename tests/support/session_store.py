"""The test session's own model store, so the suite never adds to the user's.

``$CLIKA_CACHE`` points at a fresh folder for the whole session: pulled names,
conversations, Hub downloads and scratch files land there and go with it, so
``clika list`` shows after the suite what it showed before. Shared with the
cache the session started with are what no command lists and what is slow to
make again: the verified downloads (``blobs/``, ``trees/``, their ``by-name/``
links, the ``partial/`` files of an interrupted fetch), the derived caches
(``fallback/`` graphs, ``toolchains/``, ``ort-headers/``) and the exports, which
live in that cache's ``tests/`` folder (``tests/exports``, where tests keep
exports on purpose), never in its own ``exports/``: a real model is exported
once, not once a run. The kernel library the install tests build is kept there
too (``tests/kernel-builds``, keyed by what it is built from).

``$CLIKA_TEST_STORE`` names a folder to use as the store instead, kept whole
between runs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from clika_runtime.store.cache import cache_root

SHARED = ("blobs", "trees", "by-name", "partial", "fallback", "toolchains", "ort-headers", "tests")
TEST_EXPORTS = Path("tests") / "exports"  # under the starting cache; its own exports/ is the user's list
KEPT_STORE_ENV = "CLIKA_TEST_STORE"
KERNEL_BUILDS = Path("tests") / "kernel-builds"  # the store's tests/ is the shared one


def session_store(folder: Path, downloads: Path | None = None) -> Path:
    """A store in ``folder`` sharing ``downloads``' (default: the cache now) downloads, caches and test exports."""
    downloads = downloads or cache_root()
    folder.mkdir(parents=True, exist_ok=True)
    links = {name: downloads / name for name in SHARED} | {"exports": downloads / TEST_EXPORTS}
    for name, target in links.items():
        target.mkdir(parents=True, exist_ok=True)
        if not (folder / name).is_symlink():  # a kept store (``$CLIKA_TEST_STORE``) has them already
            with contextlib.suppress(FileExistsError):  # another test worker linked it first
                (folder / name).symlink_to(target, target_is_directory=True)
    return folder
