"""The fallback's rewritten graphs kept between loads, so only the first load pays for them.

Rewriting a folder's GgufMatMul nodes into the MatMulNBits form decodes every GGUF
matrix (Qwen2.5-Coder-1.5B: ~29 s and 3.3 GB at every load). The first load writes
the result to ``$CLIKA_CACHE/fallback/<key>/``: the rewritten graph (``model.onnx``),
its computed initializers in one file (``weights.bin``, each array 64-byte aligned)
and their index (``index.json``). Later loads map ``weights.bin`` read-only, so the
arrays are read in place (no decode, no copy) and processes serving one folder share
its pages. The key is the graph's bytes, the size and modification time of the
folder's files the graph names (its external data), and the rewrite's form, so an
edited folder or a changed rewrite is never served a stale entry. Where the cache
cannot be written, the load goes on with the arrays in memory, as without it. The
cache is bounded, least recently used entries first (``fallback_budget``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from clika_runtime.kernels.block_sums import BLOCK_SUM_FORM
from clika_runtime.kernels.fallback_budget import mark_used, prune
from clika_runtime.kernels.fallback_graph import RewrittenGraph, rewrite
from clika_runtime.store.cache import cache_root

log = logging.getLogger("clika_runtime.kernels")
# Bumped whenever the rewrite's output changes for the same input.
FORM_VERSION = 2
ALIGN = 64


def fallback_dir(cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "fallback"


def cache_key(model_bytes: bytes, folder: Path | None) -> str:
    digest = hashlib.sha256(model_bytes)
    digest.update(f"form {FORM_VERSION} {BLOCK_SUM_FORM}".encode())
    if folder is not None and folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.is_file() and path.name.encode() in model_bytes:
                stat = path.stat()
                digest.update(f"{path.name} {stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def cached_rewrite(model_bytes: bytes, folder: Path | None) -> RewrittenGraph:
    """``fallback_graph.rewrite`` of the graph, from the cache where an entry is there."""
    entry = fallback_dir() / cache_key(model_bytes, folder)
    found = _read(entry)
    if found is not None:
        log.info("fallback graph read from %s", entry)
        mark_used(entry)
        return found
    rewritten = rewrite(model_bytes, folder)
    try:
        _write(entry, rewritten)
        prune(entry.parent, keep=entry)
    except OSError as exc:
        log.warning("fallback graph not cached (%s): the next load rewrites it again", exc)
    return rewritten


def _read(entry: Path) -> RewrittenGraph | None:
    """The entry's graph and arrays (mapped, not read), or None where it is absent or unreadable."""
    try:
        index = json.loads((entry / "index.json").read_text())
        model = (entry / "model.onnx").read_bytes()
        weights = np.memmap(entry / "weights.bin", dtype=np.uint8, mode="r") if index["arrays"] else None
        supplied = {}
        for item in index["arrays"]:
            dtype = np.dtype(item["dtype"])
            size = int(np.prod(item["shape"], dtype=np.int64)) * dtype.itemsize
            raw = weights[item["offset"] : item["offset"] + size]
            supplied[item["name"]] = raw.view(dtype).reshape(item["shape"])
        return RewrittenGraph(
            model, supplied, int(index["nodes"]), int(index.get("attention", 0)), int(index.get("heads", 0))
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(entry: Path, rewritten: RewrittenGraph) -> None:
    """Writes the entry beside it and renames it into place, so a reader never sees half of one."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=entry.parent))
    try:
        arrays, offset = [], 0
        with (scratch / "weights.bin").open("wb") as f:
            for name, array in rewritten.supplied.items():
                padding = -offset % ALIGN
                f.write(b"\0" * padding)
                offset += padding
                data = np.ascontiguousarray(array)
                f.write(data.tobytes())
                arrays.append(
                    {"name": name, "dtype": data.dtype.str, "shape": list(data.shape), "offset": offset}
                )
                offset += data.nbytes
        (scratch / "model.onnx").write_bytes(rewritten.model)
        index = {
            "nodes": rewritten.nodes,
            "attention": rewritten.attention,
            "heads": rewritten.heads,
            "arrays": arrays,
        }
        (scratch / "index.json").write_text(json.dumps(index))
        os.replace(scratch, entry)
    finally:  # after a failure (or a rename refused: another process wrote the entry first)
        shutil.rmtree(scratch, ignore_errors=True)
