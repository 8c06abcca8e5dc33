"""The suite's store is the session's own: what tests pull or save never reaches the user's
``clika list``, and exports go to the cache's test exports, never to the exports it lists; the
verified downloads and derived caches are shared so real models download and export once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.session_store import SHARED, TEST_EXPORTS, session_store

from clika_runtime.store import cache_root
from clika_runtime.store.cache import exports_dir, names_dir
from clika_runtime.store.names import NameRecord, write_record


def test_the_store_is_the_sessions_own_folder(store_of_the_session: Path):
    assert cache_root() == store_of_the_session
    assert "CLIKA_CHAT_HOME" not in os.environ  # conversations go under the session's store
    assert not names_dir().is_symlink()
    assert exports_dir().resolve().parts[-2:] == TEST_EXPORTS.parts  # not a cache's listed exports
    user_default = Path.home() / ".cache" / "clika"
    assert not store_of_the_session.resolve().is_relative_to(user_default.resolve())


def test_a_subprocess_uses_the_sessions_store(store_of_the_session: Path):
    shown = subprocess.run(
        [sys.executable, "-c", "from clika_runtime.store import cache_root; print(cache_root())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(shown) == store_of_the_session


def test_downloads_caches_and_test_exports_are_shared_and_nothing_else(tmp_path: Path):
    downloads = tmp_path / "user-cache"
    store = session_store(tmp_path / "session", downloads=downloads)
    for name in SHARED:
        assert (store / name).resolve() == (downloads / name).resolve()
    (store / "exports" / "model-a").mkdir()  # an export made in the session
    (store / "names").mkdir()
    assert (downloads / TEST_EXPORTS / "model-a").is_dir()
    assert not (downloads / "exports").exists() and not (downloads / "names").exists()


def test_a_name_pulled_in_the_session_is_recorded_in_the_sessions_store_only(store_of_the_session: Path):
    write_record(NameRecord("session-tiny", "0" * 64))
    recorded = [path for path in names_dir().rglob("*") if path.is_file()]
    assert recorded and all(path.is_relative_to(store_of_the_session) for path in recorded)
