"""The export extra's puller, found at run time: the one place the store reaches it.

The runtime never imports ``clika_export`` (it may be absent, or present
without its dependencies on a runtime-only install); the store looks the
puller module up by name when a name must be pulled or a checkpoint hashed.
The module offers ``pull(spec, precision, *, pull, say, progress) ->
LocalModel``, ``can_pull(name) -> bool`` (a catalog name or Hub spec),
``known_records() -> list[NameRecord]`` (the catalog's names)
and ``source_sha256(path) -> str``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from clika_runtime.store.local_model import ModelError

PULLER_MODULE = "clika_export.pull.puller"
INSTALL_HINT = "pip install 'clika-runtime[export]'"


def puller() -> ModuleType | None:
    """The puller module, or None when the export extra is not installed."""
    try:
        return importlib.import_module(PULLER_MODULE)
    except ImportError:
        return None


def require_puller(what: str) -> ModuleType:
    """The puller module, or a ModelError saying that ``what`` needs the export extra and why it is missing."""
    try:
        return importlib.import_module(PULLER_MODULE)
    except ImportError as exc:
        raise ModelError(f"{what} needs the export extra ({INSTALL_HINT}): {exc}") from None
