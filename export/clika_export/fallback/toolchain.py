"""optimum's ONNX exporter and the transformers it runs with: pinned wheels, fetched on first use.

optimum-onnx 0.1.0 (the latest release) imports only with transformers < 4.58,
while the export extra's transformers is newer, and pip cannot install both in
one environment. So the fallback never installs it: the pinned wheels below
(sha256-checked, from the index pip is configured for) are unpacked into
``$CLIKA_CACHE/toolchains/optimum-<pins digest>`` and put first on the
``PYTHONPATH`` of the exporter's subprocess, which takes torch, onnx and the
rest from this environment. Only ``tokenizers`` is a binary wheel: it is pinned
for the platforms listed, and other platforms are refused by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from clika_export.pull.pip_config import PipConfigError, read_index_config
from clika_export.pull.resumable_download import DownloadError, download
from clika_export.pull.simple_index import PackageIndexError, connection, find_wheel
from clika_runtime.store.cache import cache_root

COMPLETE = ".clika-toolchain.json"


class ToolchainError(RuntimeError):
    """The optimum toolchain could not be fetched or unpacked (the message says why)."""


@dataclass(frozen=True)
class Pin:
    package: str
    version: str
    sha256: str


_PURE = (
    Pin("optimum", "2.1.0", "bc3af32e1236a9b2c2ca1d27ed9d3ab1b6591e24c6bcd47f9671a8198a30ea88"),
    Pin("optimum-onnx", "0.1.0", "0301ec7a6ec5c77a57581e9970d380a6dc104bdb8f15b282e05af40d829c2eda"),
    Pin("transformers", "4.57.6", "4c9e9de11333ddfe5114bc872c9f370509198acf0b87a832a0ab9458e2bd0550"),
    Pin("huggingface_hub", "0.36.0", "7bcc9ad17d5b3f07b57c78e79d527102d08313caa278a641993acddcb894548d"),
)
# tokenizers 0.22.2 (transformers 4.57 refuses the newer one at import), abi3 wheels per platform.
_TOKENIZERS = {
    ("Linux", "x86_64"): "369cc9fc8cc10cb24143873a0d95438bb8ee257bb80c71989e3ee290e8d72c67",
    ("Linux", "aarch64"): "2249487018adec45d6e3554c71d46eb39fa8ea67156c640f7513eb26f318cec7",
    ("Darwin", "arm64"): "1e418a55456beedca4621dbab65a318981467a2b188e982a23e117f115ce5001",
}


def pins() -> tuple[Pin, ...]:
    """The wheels of this platform's toolchain (ToolchainError on a platform none is pinned for)."""
    machine = (platform.system(), platform.machine())
    digest = _TOKENIZERS.get(machine)
    if digest is None:
        shown = ", ".join(f"{system} {arch}" for system, arch in _TOKENIZERS)
        raise ToolchainError(
            f"the optimum exporter's toolchain is pinned for {shown}, not {machine[0]} {machine[1]}"
        )
    return (*_PURE, Pin("tokenizers", "0.22.2", digest))


def toolchain_dir(cache: Path | None = None, progress: bool = True) -> Path:
    """The unpacked toolchain (fetched and unpacked once; the folder appears only when complete)."""
    chosen = pins()
    key = hashlib.sha256("".join(f"{p.package}=={p.version} {p.sha256}\n" for p in chosen).encode())
    root = Path(cache) if cache is not None else cache_root()
    target = root / "toolchains" / f"optimum-{key.hexdigest()[:16]}"
    if (target / COMPLETE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".optimum-", dir=target.parent))
    try:
        staged = work / "site"
        for pin in chosen:
            _unpack(_fetch(pin, root, work, progress), staged)
        (staged / COMPLETE).write_text(json.dumps([p.__dict__ for p in chosen], indent=1), encoding="utf-8")
        if not (target / COMPLETE).is_file():  # another process may have finished first
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staged, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def subprocess_env(site: Path) -> dict[str, str]:
    """The environment of the exporter's subprocess: the toolchain first, offline, no telemetry."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    env.update(TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    return env


def python() -> str:
    """The interpreter the exporter runs on: this one (its torch and onnx)."""
    return sys.executable


def _fetch(pin: Pin, cache: Path, work: Path, progress: bool) -> Path:
    try:
        config = read_index_config()
        link = find_wheel(config, pin.package, pin.version, pin.sha256)
        if link.sha256 and link.sha256 != pin.sha256:
            raise ToolchainError(
                f"{link.filename}: the index lists sha256 {link.sha256}, the toolchain pins {pin.sha256}"
            )
        partials = cache / "partial"
        partials.mkdir(parents=True, exist_ok=True)
        with tqdm(
            desc=f"optimum toolchain: {pin.package}",
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=sys.stderr,
            disable=not progress,
        ) as bar:
            done = download(
                link.url,
                partials / link.filename.replace("/", "_"),
                connection=connection(config),
                sha256=pin.sha256,
                size=link.size,
                bar=bar,
            )
    except (PipConfigError, PackageIndexError, DownloadError) as exc:
        raise ToolchainError(f"fetching {pin.package}=={pin.version} failed: {exc}") from None
    wheel = work / done.name
    os.replace(done, wheel)
    return wheel


def _unpack(wheel: Path, staged: Path) -> None:
    """A wheel's files into ``staged`` (what installing a pure or abi3 wheel puts in site-packages)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                parts = Path(info.filename).parts
                if Path(info.filename).is_absolute() or ".." in parts:
                    raise ToolchainError(f"{wheel.name} has an unsafe member name {info.filename!r}")
                archive.extract(info, staged)
    except zipfile.BadZipFile as exc:
        raise ToolchainError(f"{wheel.name} is not a valid wheel: {exc}") from None
    wheel.unlink()
