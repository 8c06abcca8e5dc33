"""Where the per-user cache lies and how it is laid out.

``$CLIKA_CACHE`` (default ``~/.cache/clika``) holds ``blobs/sha256/<hex>``
(verified downloads), ``by-name/<item>/<file>`` (links to them under their own
file names), ``hub/<owner>/<repo>/<commit>/`` (verified Hub downloads),
``exports/<key>`` (model folders), ``names/`` (what each pulled name stands
for), ``partial/`` (interrupted downloads, continued by the next run) and
``tmp/`` (scratch space on the same file system, so renames into place are
atomic).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "CLIKA_CACHE"


def cache_root() -> Path:
    """The cache folder: ``$CLIKA_CACHE`` or ``~/.cache/clika``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "clika"


def exports_dir(cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "exports"


def names_dir(cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "names"


def blob_path(sha256: str, cache: Path | None = None) -> Path:
    """Where a verified file with this sha256 lives in the cache."""
    return (cache or cache_root()) / "blobs" / "sha256" / sha256
