"""The suite's store is the session's own: what tests export, pull or save never reaches the user's
``clika list``, while the verified downloads are shared so real models download once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from store_models import link_export
from support.session_store import SHARED_DOWNLOADS, session_store

from clika_runtime.store import cache_root, cached_exports
from clika_runtime.store.cache import exports_dir, names_dir


def test_the_store_is_the_sessions_own_folder(store_of_the_session: Path):
    assert cache_root() == store_of_the_session
    assert "CLIKA_CHAT_HOME" not in os.environ  # conversations go under the session's store
    for listed in (exports_dir(), names_dir()):
        assert not listed.is_symlink()
        assert listed.resolve().is_relative_to(store_of_the_session.resolve()) or not listed.exists()
    user_default = Path.home() / ".cache" / "clika"
    assert not store_of_the_session.resolve().is_relative_to(user_default.resolve())


def test_a_subprocess_lists_the_sessions_store(store_of_the_session: Path):
    shown = subprocess.run(
        [sys.executable, "-c", "from clika_runtime.store import cache_root; print(cache_root())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(shown) == store_of_the_session


def test_only_the_downloads_are_shared_with_the_starting_cache(tmp_path: Path):
    downloads = tmp_path / "user-cache"
    store = session_store(tmp_path / "session", downloads=downloads)
    for name in SHARED_DOWNLOADS:
        assert (store / name).resolve() == (downloads / name).resolve()
    (store / "exports" / "model-a").mkdir(parents=True)  # an export made in the session
    (store / "blobs" / "sha256").mkdir()
    assert not (downloads / "exports").exists()
    assert (downloads / "blobs" / "sha256").is_dir()


def test_a_model_pulled_in_the_session_is_listed_in_the_sessions_store_only(
    store_of_the_session: Path, tiny_llama_model: Path
):
    link = link_export(tiny_llama_model, "session-tiny", "0" * 64, cache_root())
    assert link.parent == store_of_the_session / "exports"
    assert link.resolve() in {export.folder.resolve() for export in cached_exports()}
