"""What a loaded model holds in memory, read from its folder: weight bytes plus its KV budget.

The weights are the continuous graph's file and its external weight files
as they lie on disk (the paged graph reads the same weights); the KV budget is what the engine's cache may
reserve: every slot a whole context window of keys and values (continuous
mode, committed as tokens are written), or the paged cache's byte cap.
"""

from __future__ import annotations

from pathlib import Path

from clika_runtime.contract.manifest import Manifest

KV_DTYPE_BYTES = {"float32": 4, "int8": 1}
PAGED_DEFAULT_BYTES = 1 << 30  # the paged cache's default cap (engine.factory.DEFAULT_KV_CACHE_BYTES)


def weight_bytes(folder: Path, manifest: Manifest | None = None) -> int:
    """Bytes of the graph a load opens and the weight files beside it (``model.onnx``, ``model.onnx.data``)."""
    manifest = manifest or Manifest.read(folder)
    spec = manifest.graphs.get("continuous") or next(iter(manifest.graphs.values()))
    graph_file = folder / spec.file
    return sum(
        path.stat().st_size for path in graph_file.parent.glob(graph_file.name + "*") if path.is_file()
    )


def kv_bytes_per_token(manifest: Manifest, kv_dtype: str = "float32") -> int:
    """Bytes of keys and values one token holds across every layer."""
    a = manifest.architecture
    return a.num_layers * 2 * a.num_kv_heads * a.head_dim * KV_DTYPE_BYTES[kv_dtype]


def kv_budget(
    folder: Path,
    slots: int,
    *,
    kv_dtype: str = "float32",
    kv_mode: str = "continuous",
    kv_cache_bytes: int | None = None,
) -> int:
    """Bytes the model's KV cache may reserve with ``slots`` requests decoding together."""
    if kv_mode == "paged":
        return kv_cache_bytes or PAGED_DEFAULT_BYTES
    manifest = Manifest.read(folder)
    whole = slots * manifest.context_window * kv_bytes_per_token(manifest, kv_dtype)
    return min(whole, kv_cache_bytes) if kv_cache_bytes else whole


def footprint(folder: Path, slots: int, **kv: object) -> int:
    """Weight bytes plus KV budget: what loading ``folder`` may take (the memory budget's unit)."""
    return weight_bytes(folder) + kv_budget(folder, slots, **kv)  # type: ignore[arg-type]
