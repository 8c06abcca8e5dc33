"""How a checkpoint says its embeddings are pooled: "mean", "last" (Qwen3-Embedding) or "cls".

A sentence-transformers folder names its Pooling module in ``modules.json``
(usually ``1_Pooling``), whose ``config.json`` sets one ``pooling_mode_*`` flag;
llama.cpp writes ``<arch>.pooling_type`` (1 mean, 2 cls, 3 last) into a GGUF.
A checkpoint that says nothing gets None (the manifest then records "mean").
Both are untrusted: a malformed file, a path leaving the folder or a mode the
runtime cannot pool is a CheckpointError naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clika_export.checkpoint import CheckpointError

POOLING_MODULE = "sentence_transformers.models.Pooling"
# sentence-transformers' flags -> our names; the first one set wins, as its Pooling reads them.
_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_lasttoken": "last",
}
_UNSUPPORTED_FLAGS = (
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
)
# llama.cpp's enum llama_pooling_type: 0 none, 1 mean, 2 cls, 3 last, 4 rank.
_GGUF_TYPES = {1: "mean", 2: "cls", 3: "last"}
_MAX_JSON_BYTES = 1 << 20


def hf_pooling(folder: Path) -> str | None:
    """The pooling a Hugging Face folder's sentence-transformers files ask for, or None."""
    modules = _json(folder, "modules.json")
    if modules is None:
        return None
    if not isinstance(modules, list):
        raise CheckpointError("modules.json does not hold a list of modules")
    for module in modules:
        if isinstance(module, dict) and module.get("type") == POOLING_MODULE:
            path = module.get("path")
            if not isinstance(path, str) or not path:
                raise CheckpointError("modules.json: the Pooling module has no path")
            return _pooling_config(folder, f"{path}/config.json")
    return None


def _pooling_config(folder: Path, name: str) -> str:
    config = _json(folder, name)
    if not isinstance(config, dict):
        raise CheckpointError(f"{name} (the Pooling module's config) is missing or not a JSON object")
    for flag in _UNSUPPORTED_FLAGS:
        if config.get(flag) is True:
            raise CheckpointError(
                f"{name}: {flag} is not a pooling the runtime does (it pools cls, mean, last)"
            )
    for flag, mode in _FLAGS.items():
        if config.get(flag) is True:
            return mode
    raise CheckpointError(f"{name} sets none of {', '.join(_FLAGS)}")


def gguf_pooling(meta: Any, family: str) -> str | None:
    """The pooling a GGUF's ``<arch>.pooling_type`` asks for, or None (absent or 0: none)."""
    key = f"{family}.pooling_type"
    if not meta.has(key):
        return None
    value = meta.integer(key, high=16)
    if value == 0:
        return None
    if value not in _GGUF_TYPES:
        raise CheckpointError(f"{key} is {value}: not a pooling the runtime does (1 mean, 2 cls, 3 last)")
    return _GGUF_TYPES[value]


def _json(folder: Path, name: str) -> Any:
    root = folder.resolve()
    path = folder / name
    if not path.is_file():
        return None
    if not path.resolve().is_relative_to(root):
        raise CheckpointError(f"{name} links outside the checkpoint folder")
    if path.stat().st_size > _MAX_JSON_BYTES:
        raise CheckpointError(f"{name} is larger than {_MAX_JSON_BYTES} bytes")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{name} is not valid JSON: {exc}") from None
