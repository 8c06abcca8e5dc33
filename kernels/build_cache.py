"""A finished kernel library kept by content, so an identical build is copied, not compiled.

Opt-in: ``$CLIKA_KERNEL_BUILD_CACHE`` names a folder (the test suite points it into its
cache, so its wheel and README installs compile once per source change, not every run).
The key is the sha256 of everything the library's bytes depend on: every file under
kernels/src, the ORT C header, the compile flags, the compiler's own ``--version`` and
the Python extension suffix; any change in them is a new key and a real compile. Entries
are written whole (a temporary file renamed into place), so a build that stops midway
never leaves a library another install would copy.

Used by setup.py only (standard library, no project imports).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

ENV = "CLIKA_KERNEL_BUILD_CACHE"


def cache_dir() -> Path | None:
    configured = os.environ.get(ENV, "").strip()
    return Path(configured).expanduser() if configured else None


def compiler_version(command: list[str]) -> str:
    """What ``<compiler> --version`` prints (empty when it cannot be asked)."""
    try:
        done = subprocess.run(
            [command[0], "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout


def build_key(sources: Path, header: Path, flags: Iterable[str], compiler: list[str]) -> str:
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    for path in sorted(p for p in sources.rglob("*") if p.is_file()):
        add(f"source {path.relative_to(sources).as_posix()}", path.read_bytes())
    add("header", header.read_bytes())
    add("flags", "\0".join(flags).encode())
    add("compiler", " ".join(compiler).encode())
    add("compiler version", compiler_version(compiler).encode())
    add("extension suffix", str(sysconfig.get_config_var("EXT_SUFFIX")).encode())
    return digest.hexdigest()


def built_once(
    target: Path,
    sources: Path,
    header: Path,
    flags: Iterable[str],
    compiler: list[str],
    build: Callable[[], None],
) -> bool:
    """Put the library at ``target``: copied from the cache when it holds this build (True),
    else ``build()`` and kept there. Without the setting it only builds (no key is computed)."""
    if cache_dir() is None:
        build()
        return False
    key = build_key(sources, header, flags, compiler)
    if reuse(key, target):
        return True
    build()
    keep(key, target)
    return False


def reuse(key: str, target: Path) -> bool:
    """Copy the library built under ``key`` to ``target``; False when the cache has none."""
    folder = cache_dir()
    entry = folder / f"{key}.so" if folder is not None else None
    if entry is None or not entry.is_file():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(entry, target)
    return True


def keep(key: str, built: Path) -> None:
    """Store a finished library under ``key`` (a failure to store only skips the cache)."""
    folder = cache_dir()
    if folder is None or not built.is_file():
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with (
            built.open("rb") as source,
            tempfile.NamedTemporaryFile(dir=folder, suffix=".partial", delete=False) as out,
        ):
            shutil.copyfileobj(source, out)
        os.chmod(out.name, 0o644)  # a library as the compiler leaves it, not a private temporary
        os.replace(out.name, folder / f"{key}.so")
    except OSError as error:
        print(f"clika kernels: the build cache {folder} is not writable ({error}); not kept")
