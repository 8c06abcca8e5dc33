"""The model store the commands use: ``clika_runtime.store`` (resolve, list, rm; pulling by the export extra)."""

from clika_runtime.store import (
    DEFAULT_MODEL,
    DEFAULT_PRECISION,
    PRECISIONS,
    CachedExport,
    LocalModel,
    ModelError,
    cached_exports,
    human_size,
    remove,
    resolve,
)

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_PRECISION",
    "PRECISIONS",
    "CachedExport",
    "LocalModel",
    "ModelError",
    "cached_exports",
    "human_size",
    "remove",
    "resolve",
]
