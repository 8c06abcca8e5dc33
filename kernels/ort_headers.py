"""Where the ONNX Runtime C API header comes from when the kernels are built.

The onnxruntime wheel ships no C headers. The build looks, in order, at
``$CLIKA_ORT_INCLUDE``, the system's ``/usr/include/onnxruntime``, and the user cache
(``$CLIKA_CACHE``, default ``~/.cache/clika``, under ``ort-headers/<sha256>``); failing
those it fetches Debian trixie's ``libonnxruntime-dev`` (ORT 1.21, API 21) with apt
through a private sources folder (the system's apt set-up is not touched), checks the
.deb against the sha256 pinned here and unpacks it into the cache. Any failure is a
reason string, never an exception: the build then goes on without the extension.

Used by setup.py only (standard library, no project imports).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

HEADER = "onnxruntime_c_api.h"
SYSTEM_DIR = Path("/usr/include/onnxruntime")
PACKAGE = "libonnxruntime-dev"
DEBIAN_SUITE = "trixie"
DEBIAN_ARCHIVE = "http://deb.debian.org/debian"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
# libonnxruntime-dev 1.21.0+dfsg-1, per Debian architecture.
PINNED_DEBS = {
    "amd64": "14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08",
    "arm64": "d4b1967893865756c0fa8536be165259a8eb0e9068e60d322ba707ef4527e44e",
}
# Seconds for each apt step; the whole fetch stays within a few minutes at worst.
STEP_TIMEOUT = 120


def cache_root() -> Path:
    configured = os.environ.get("CLIKA_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "clika"


def debian_arch() -> str | None:
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )


def find_include_dir(log=print) -> Path | None:
    """The folder holding onnxruntime_c_api.h, fetching it if needed; None (and a logged reason) if not."""
    configured = os.environ.get("CLIKA_ORT_INCLUDE")
    candidates = [Path(configured)] if configured else []
    candidates.append(SYSTEM_DIR)
    arch = debian_arch()
    if arch in PINNED_DEBS:
        candidates.append(_cached_dir(PINNED_DEBS[arch]))
    for folder in candidates:
        if (folder / HEADER).is_file():
            return folder
    if arch not in PINNED_DEBS:
        log(f"no pinned {PACKAGE} for machine {platform.machine()!r}")
        return None
    reason = fetch_headers(arch)
    if reason:
        log(f"could not fetch the ONNX Runtime header: {reason}")
        return None
    return _cached_dir(PINNED_DEBS[arch])


def _cached_dir(sha256: str) -> Path:
    return cache_root() / "ort-headers" / sha256 / "usr" / "include" / "onnxruntime"


def fetch_headers(arch: str) -> str:
    """Downloads and unpacks the pinned .deb into the cache; returns "" or why it failed."""
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        return "apt-get and dpkg are needed to fetch it (or install libonnxruntime-dev, or set CLIKA_ORT_INCLUDE)"
    if not KEYRING.is_file():
        return f"the Debian archive keyring {KEYRING} is missing"
    sha256 = PINNED_DEBS[arch]
    with tempfile.TemporaryDirectory(prefix="clika-ort-headers-") as work:
        work_dir = Path(work)
        deb, reason = _download_deb(work_dir, arch)
        if reason:
            return reason
        digest = hashlib.sha256(deb.read_bytes()).hexdigest()
        if digest != sha256:
            return f"{deb.name} has sha256 {digest}, pinned {sha256}"
        unpacked = work_dir / "unpacked"
        reason = _run(["dpkg", "-x", str(deb), str(unpacked)], work_dir)
        if reason:
            return reason
        target = cache_root() / "ort-headers" / sha256
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{sha256}-", dir=target.parent))
        shutil.copytree(unpacked / "usr" / "include", staging / "usr" / "include")
        try:
            staging.rename(target)  # atomic: a concurrent build either sees all of it or none
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return "" if (_cached_dir(sha256) / HEADER).is_file() else "the unpacked package has no " + HEADER


def _download_deb(work: Path, arch: str) -> tuple[Path, str]:
    parts = work / "sources.list.d"
    parts.mkdir()
    (parts / f"{DEBIAN_SUITE}.sources").write_text(
        f"Types: deb\nURIs: {DEBIAN_ARCHIVE}\nSuites: {DEBIAN_SUITE}\nComponents: main\nSigned-By: {KEYRING}\n"
    )
    for sub in ("lists/partial", "cache/archives/partial"):
        (work / sub).mkdir(parents=True)
    options = [
        "-o", "Dir::Etc::SourceList=/dev/null",
        "-o", f"Dir::Etc::SourceParts={parts}",
        "-o", f"Dir::State::Lists={work / 'lists'}",
        "-o", f"Dir::Cache={work / 'cache'}",
        "-o", "Debug::NoLocking=1",
        "-o", f"APT::Architectures::={arch}",
        "-o", f"APT::Architecture={arch}",
    ]  # fmt: skip
    reason = _run(["apt-get", *options, "update"], work)
    if not reason:
        reason = _run(["apt-get", *options, "download", f"{PACKAGE}:{arch}"], work)
    debs = sorted(work.glob(f"{PACKAGE}_*_{arch}.deb"))
    if reason or not debs:
        return work, reason or f"apt-get downloaded no {PACKAGE} .deb"
    return debs[0], ""


def _run(command: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{command[0]} {command[-1]}: {error}"
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"{command[0]} {command[-1]} exited {done.returncode}: {tail[0]}"
    return ""
