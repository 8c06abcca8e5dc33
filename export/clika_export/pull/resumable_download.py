"""One URL -> one verified file: resumed from a partial download, sha256-checked, renamed into place.

The partial file (``<target>.part``) survives a failed or interrupted run and
is continued with an HTTP ``Range`` request next time (started over when the
server ignores the range). Only a file whose sha256 matches is renamed to
``target``; a mismatch deletes the partial, so nothing unverified is kept.
A lock file keeps two processes from writing one partial file at once.
"""

from __future__ import annotations

import http.client
import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from clika_export.file_lock import held_lock
from clika_export.readers.regular_file import file_sha256

_CHUNK = 1 << 20
_RANGE = re.compile(r"bytes (\d+)-\d+/(\d+|\*)")


class DownloadError(RuntimeError):
    """A download that failed or did not verify (the message says which, and whether it resumes)."""


@dataclass(frozen=True)
class Connection:
    """How to ask a server: extra headers (a token), seconds without data before failing, a CA bundle."""

    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 60.0
    cafile: str | None = None

    def open(self, url: str, headers: dict[str, str] | None = None):
        """``urlopen`` with these settings (``file://`` URLs too)."""
        context = ssl.create_default_context(cafile=self.cafile) if self.cafile else None
        request = urllib.request.Request(
            url, headers={"User-Agent": "clika-export", **self.headers, **(headers or {})}
        )
        return urllib.request.urlopen(request, timeout=self.timeout, context=context)


def download(
    url: str,
    target: Path,
    *,
    connection: Connection,
    sha256: str | None,
    size: int | None,
    bar: tqdm,
    verify_bar: tqdm | None = None,
    check: Callable[[Path], str | None] | None = None,
    partial: Path | None = None,
    label: str | None = None,
) -> Path:
    """Download ``url`` to ``target`` (resuming ``target.part``), checking ``sha256`` when given.

    ``check(partial)`` may refuse the finished file by returning why (another
    kind of hash); a refused or mismatched file is deleted. ``bar`` counts the
    bytes (resumed ones included); its total is the caller's, else this file's
    size once the server says it. ``partial`` (default ``<target>.part``) is
    where the bytes wait, beside a ``.lock`` file. Messages name ``label``
    (default: the URL; a signed URL should not be shown).
    """
    partial = partial or target.with_name(target.name + ".part")
    partial.parent.mkdir(parents=True, exist_ok=True)
    with held_lock(partial.with_name(partial.name + ".lock")):
        if size is not None and partial.is_file() and partial.stat().st_size > size:
            partial.unlink()  # longer than the file can be: not a prefix of it
        _fetch_rest(url, partial, connection, size, bar, label or url)
        if sha256 is not None:
            digest = file_sha256(partial, verify_bar)
            if digest != sha256:
                partial.unlink()
                raise DownloadError(
                    f"{target.name}: sha256 mismatch: got {digest}, expected {sha256}; nothing was cached"
                )
        refusal = check(partial) if check is not None else None
        if refusal is not None:
            partial.unlink()
            raise DownloadError(refusal)
        os.replace(partial, target)
    return target


def _fetch_rest(
    url: str, partial: Path, connection: Connection, size: int | None, bar: tqdm, label: str
) -> None:
    have = partial.stat().st_size if partial.is_file() else 0
    if size is not None and have == size:
        _count_resumed(bar, have)
        return  # complete already; the hash decides
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with connection.open(url, headers) as response, open(partial, "ab") as out:
            start = _resume_offset(response, have)
            if start == 0 and have:
                out.truncate(0)  # the server sent the whole file
            length = response.headers.get("Content-Length", "")
            if bar.total is None and length.isdigit():
                bar.total = bar.n + start + int(length)  # the whole file when the caller knew no size
            _count_resumed(bar, start)
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                bar.update(len(chunk))
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:
            return  # nothing left to send: the partial file is whole (the hash decides)
        raise DownloadError(f"{label} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        done = partial.stat().st_size if partial.is_file() else 0
        reason = getattr(exc, "reason", None) or exc.__class__.__name__
        raise DownloadError(
            f"the download of {label} stopped after {done} bytes ({reason}); run again to resume it"
        ) from None
    got = partial.stat().st_size
    if size is not None and got != size:
        raise DownloadError(
            f"the download of {label} stopped after {got} of {size} bytes; run again to resume it"
        )


def _count_resumed(bar: tqdm, size: int) -> None:
    """Bytes already on disk: shown as done, but not counted in the speed (nor the ETA)."""
    if bar.disable:
        return
    bar.n += size
    bar.initial += size
    bar.refresh()


def _resume_offset(response, have: int) -> int:
    """Where the body starts: ``have`` for a 206 continuing the partial file, 0 for a whole file."""
    if getattr(response, "status", 200) != 206:
        return 0
    match = _RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
    if match is None or int(match.group(1)) != have:
        raise DownloadError(f"the server answered a range other than bytes {have}-: {response.headers}")
    return have
