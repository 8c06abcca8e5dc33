"""Files from the Hugging Face Hub through ``huggingface_hub``: listing, metadata, resumable verified downloads.

The Hub's API as ``huggingface_hub`` speaks it (``HfApi.model_info`` for the
listing, ``get_hf_file_metadata`` for each file's hash, size and download
URL, ``build_hf_headers`` for ``HF_TOKEN``), so ``HF_ENDPOINT``, ``HF_TOKEN``
and ``HF_HUB_OFFLINE`` apply and its errors name the problem. The bytes go
through ``resumable_download``: huggingface_hub starts every interrupted
download over (its temporary files are per process and removed on failure),
while a partial file here is continued by the next run with a ``Range``
request, shown with its total and ETA, and renamed into place only once its
hash matches the one the Hub lists: the sha256 of an LFS file
(``X-Linked-Etag``), the git blob sha1 of any other.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url
from huggingface_hub.utils import build_hf_headers
from tqdm import tqdm

from clika_export.pull.hub_spec import HubSpec
from clika_export.pull.resumable_download import Connection, DownloadError, download
from clika_export.readers.regular_file import file_sha256

_SHA256 = re.compile(r"[0-9a-f]{64}")
_GIT_SHA1 = re.compile(r"[0-9a-f]{40}")
_TRUE = ("1", "ON", "YES", "TRUE")
_CHUNK = 1 << 22


class HubError(RuntimeError):
    """A Hub request or download that failed (one line saying what, and what to do)."""


@dataclass(frozen=True)
class Listing:
    commit: str  # the revision resolved to a commit, so every file comes from one snapshot
    files: tuple[str, ...]


def endpoint() -> str:
    """``HF_ENDPOINT`` as set now (huggingface_hub reads it once, at import)."""
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def is_offline() -> bool:
    """huggingface_hub's offline mode, or ``HF_HUB_OFFLINE`` set since it was imported."""
    return constants.is_offline_mode() or os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE


def list_repository(spec: HubSpec) -> Listing:
    with hub_errors(spec):
        info = HfApi(endpoint=endpoint()).model_info(spec.repo_id, revision=spec.revision)
    if not info.sha:
        raise HubError(f"{spec.text}: the Hub named no commit for {spec.repo_id} at {spec.revision}")
    return Listing(info.sha, tuple(sorted(s.rfilename for s in info.siblings or ())))


def download_file(spec: HubSpec, commit: str, path: str, target: Path, partial: Path, progress: bool) -> str:
    """``path`` at ``commit`` into ``target`` (resuming ``partial``); returns its verified sha256."""
    with hub_errors(spec, path):
        url = hf_hub_url(spec.repo_id, path, revision=commit, endpoint=endpoint())
        headers = build_hf_headers()
        meta = get_hf_file_metadata(url, headers=headers, endpoint=endpoint())
    expected = (meta.etag or "").strip('"')
    if not (_SHA256.fullmatch(expected) or _GIT_SHA1.fullmatch(expected)):
        raise HubError(
            f"{spec.text}: {path}: the Hub lists no sha256 or git hash for it (ETag {meta.etag!r})"
        )
    if target.is_file() and target.stat().st_size == meta.size and _matches(target, expected):
        return expected if _SHA256.fullmatch(expected) else file_sha256(target)
    if _host(meta.location) != _host(url):
        headers.pop("authorization", None)  # a CDN's signed URL: the token stays with the Hub
    target.parent.mkdir(parents=True, exist_ok=True)
    lfs = _SHA256.fullmatch(expected) is not None
    with tqdm(
        desc=path, total=meta.size, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
        disable=not progress,
    ) as bar:  # fmt: skip
        try:
            download(
                meta.location,
                target,
                connection=Connection(headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT),
                sha256=expected if lfs else None,
                size=meta.size,
                bar=bar,
                check=None if lfs else lambda done: _git_refusal(done, expected),
                partial=partial,
                label=path,
            )
        except DownloadError as exc:
            raise HubError(f"{spec.text}: {exc}") from None
    return expected if lfs else file_sha256(target)


def _git_refusal(partial: Path, expected: str) -> str | None:
    got = _git_sha1(partial)
    return (
        None
        if got == expected
        else f"git sha1 mismatch: got {got}, the Hub lists {expected}; nothing was kept"
    )


@contextlib.contextmanager
def hub_errors(spec: HubSpec, path: str | None = None) -> Iterator[None]:
    """huggingface_hub's and the transport's exceptions -> one HubError line naming the spec."""
    where = f"{spec.repo_id} at {spec.revision}"
    try:
        yield
    except GatedRepoError:
        raise HubError(
            f"{spec.text}: {spec.repo_id} is gated: accept its terms on the Hub, then set HF_TOKEN"
        ) from None
    except RepositoryNotFoundError:
        raise HubError(
            f"{spec.text}: no model repository {spec.repo_id} on {endpoint()} (a private one needs HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise HubError(f"{spec.text}: {spec.repo_id} has no revision {spec.revision!r}") from None
    except EntryNotFoundError:
        raise HubError(f"{spec.text}: {where} has no file {path}") from None
    except OfflineModeIsEnabled:
        raise HubError(
            f"{spec.text}: the Hub is offline (HF_HUB_OFFLINE is set) and this was never downloaded"
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "an error"
        raise HubError(
            f"{spec.text}: the Hub answered {status} for {path or spec.repo_id}; run again to resume"
        ) from None
    except (httpx2.HTTPError, OSError) as exc:
        raise HubError(
            f"{spec.text}: cannot download from {endpoint()}: {exc}; run again to resume"
        ) from None


def _matches(path: Path, expected: str) -> bool:
    return _digest(path, expected) == expected


def _digest(path: Path, expected: str) -> str:
    """The file's hash of the kind ``expected`` is: sha256 for LFS files, the git blob sha1 otherwise."""
    return file_sha256(path) if _SHA256.fullmatch(expected) else _git_sha1(path)


def _git_sha1(path: Path) -> str:
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _kind(expected: str) -> str:
    return "sha256" if _SHA256.fullmatch(expected) else "git sha1"


def _host(url: str) -> str:
    return urllib.parse.urlparse(url).netloc.lower()
