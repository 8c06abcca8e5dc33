"""What ``clika show`` and ``clika list --available`` tell about a model, as plain data (JSON-ready).

A pulled model is described from its manifest and its loaded chat template
(tool-call format and reasoning mode are what the runtime makes of the
template, so the model is opened to read them); a catalog model not pulled
yet from the catalog alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from clika_export.pull.catalog import CATALOG, GGUF, CatalogItem, default_model
from clika_runtime.store import PRECISIONS, CachedExport, LocalModel, cached_exports, human_size


def catalog_models() -> list[dict[str, Any]]:
    """Every model in the catalog: name, download size, what it is for, which precisions are pulled."""
    pulled = _pulled_by_sha()
    return [
        _catalog_entry(item, pulled.get(item.sha256 or "", []))
        for item in CATALOG.values()
        if item.kind == GGUF
    ]


def _catalog_entry(item: CatalogItem, pulled: list[str]) -> dict[str, Any]:
    return {
        "name": item.name,
        "default": item.name == default_model(),
        "download_bytes": item.size,
        "download_size": human_size(item.size or 0),
        "family": item.family,
        "exportable": _exportable(item.family),
        "purpose": item.purpose,
        "description": item.description,
        "license": item.license,
        "pulled": pulled,
    }


def _exportable(family: str | None) -> bool | None:
    """Whether the export builds this family (None: the export extra is not installed to say)."""
    try:
        from clika_export.families import supported
    except ImportError:
        return None
    return family in supported()


def _pulled_by_sha() -> dict[str, list[str]]:
    pulled: dict[str, list[str]] = {}
    for export in cached_exports():
        pulled.setdefault(export.source_sha256, []).append(export.precision)
    return pulled


def export_entry(export: CachedExport) -> dict[str, Any]:
    """One row of ``clika list --json``."""
    return {
        "name": export.name,
        "precision": export.precision,
        "size_bytes": export.size,
        "size": human_size(export.size),
        "path": str(export.folder),
        "source_sha256": export.source_sha256,
    }


def describe(local: LocalModel) -> dict[str, Any]:
    """Everything ``clika show`` prints about a pulled (or in-place) model."""
    from clika_runtime import modelverse
    from clika_runtime.contract.manifest import Manifest

    manifest = Manifest.read(local.folder)
    model = modelverse.load(local.folder, threads=1)
    try:
        tools = model.tool_call_format if model.supports_tools else None
        reasoning = model.reasoning_mode
        has_template = model.has_chat_template
        media = {
            "vision": model.supports_vision,
            "audio": model.supports_audio,
            "video": model.supports_video,
        }
        kernels = model.kernels  # the kernel library (and its ISA) or the MatMulNBits rewrite, and why
    finally:
        model.close()
    item = _catalog_item_of(manifest.provenance.source_sha256)
    size = local.size
    return {
        "name": local.name,
        "path": str(local.folder),
        "architecture": dataclasses.asdict(manifest.architecture),
        # "native" (the export's own families) or "optimum" (its ONNX exporter; the slower path).
        "builder": manifest.graphs["continuous"].builder if "continuous" in manifest.graphs else None,
        "context_window": manifest.context_window,
        "precision": {
            "weights": local.precision,
            "pulled": _pulled_by_sha().get(manifest.provenance.source_sha256, []),
            "choices": list(PRECISIONS),
            "kv_cache": _kv_choices(manifest.graphs),
        },
        "size_bytes": size,
        "size": human_size(size),
        "chat_template": manifest.chat_template_file if has_template else None,
        "tool_call_format": tools,
        "reasoning_mode": reasoning,
        "media": media,  # what the model reads beside text (a vision graph: images)
        "kernels": kernels,
        "generation_defaults": dict(manifest.generation_defaults),
        "quality": dict(manifest.quality),
        "source": dataclasses.asdict(manifest.provenance),
        "catalog": _catalog_summary(item) if item is not None else None,
    }


def _catalog_summary(item: CatalogItem) -> dict[str, Any]:
    return {
        "name": item.name,
        "purpose": item.purpose,
        "description": item.description,
        "license": item.license,
        "download_size": human_size(item.size or 0),
    }


def not_pulled(item: CatalogItem) -> dict[str, Any]:
    """``clika show`` of a catalog model that is not pulled yet."""
    return {**_catalog_entry(item, []), "pull": f"clika pull {item.name}"}


def _kv_choices(graphs: dict[str, Any]) -> dict[str, list[str]]:
    """The KV cache modes and dtypes the folder has graphs for ("paged:int8" -> paged, int8)."""
    modes, dtypes = set(), set()
    for key in graphs:
        mode, _, dtype = key.partition(":")
        modes.add(mode)
        dtypes.add(dtype or "float32")
    return {"modes": sorted(modes), "dtypes": sorted(dtypes)}


def _catalog_item_of(source_sha256: str) -> CatalogItem | None:
    return next((item for item in CATALOG.values() if item.sha256 == source_sha256), None)


def first_pulled(name: str) -> LocalModel | None:
    """The first pulled export of ``name`` in precision order (int4, int8, fp32), or None."""
    export = next((e for e in cached_exports() if e.name == name), None)
    return None if export is None else LocalModel(name, export.folder, export.precision)
