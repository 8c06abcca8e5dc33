"""The model store: model names and paths -> model folders in the per-user cache.

A model is named by a catalog name (``smollm2-135m-instruct``), a Hub spec
(``hf://OWNER/REPO`` or ``hf://OWNER/REPO/FILE.gguf``) or a path: a ``.gguf``
file, a Hugging Face folder, or an exported model folder (used where it lies).
Exports live in ``$CLIKA_CACHE/exports/<key>``; ``names/`` records which name
was pulled from which source, so a runtime-only install (no export extra)
resolves, lists and removes what was pulled before. Pulling (fetch, verify,
export) belongs to the export extra, which the store finds at run time
(``clika_runtime.store.export_extra``); the runtime never imports it.
"""

from clika_runtime.store.cache import CACHE_ENV, cache_root
from clika_runtime.store.exports import CachedExport, cached_exports
from clika_runtime.store.local_model import (
    DEFAULT_MODEL,
    DEFAULT_PRECISION,
    PRECISIONS,
    LocalModel,
    ModelError,
)
from clika_runtime.store.remove import remove
from clika_runtime.store.resolve import resolve
from clika_runtime.store.sizes import folder_size, human_size

__all__ = [
    "CACHE_ENV",
    "DEFAULT_MODEL",
    "DEFAULT_PRECISION",
    "PRECISIONS",
    "CachedExport",
    "LocalModel",
    "ModelError",
    "cache_root",
    "cached_exports",
    "folder_size",
    "human_size",
    "remove",
    "resolve",
]
