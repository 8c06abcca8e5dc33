"""How a graph with the kernel library's nodes opens: on the library, or rewritten for ORT alone.

``open_session`` hands every step graph here first. A graph without the op opens
as before. One with it opens as it is where the kernel library is loaded (its
ops registered on the session options); otherwise (no library built for this
machine, ``CLIKA_KERNELS=off``) its GgufMatMul nodes are rewritten into the
MatMulNBits form and its StepAttention nodes into GroupQueryAttention (``fallback_graph``; kept between loads by ``fallback_cache``) and the
computed weights handed to the session. ``GraphPath`` says which of the two ran and why; it is logged and kept
on the session (``session.kernel_path``) for ``clika show``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from clika_runtime.kernels.fallback_cache import cached_rewrite
from clika_runtime.kernels.fallback_graph import has_kernel_ops

log = logging.getLogger("clika_runtime.kernels")
# Where ORT finds the external data of a graph opened from bytes (the folder's data file).
_EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"


@dataclass(frozen=True)
class GraphPath:
    """Which path computes a graph's GgufMatMul, StepAttention and HeadRescore nodes."""

    kernels: bool  # the kernel library's op (False: MatMulNBits, rewritten at load)
    detail: str  # the library's ISA, or why it is not used
    nodes: int = 0  # GgufMatMul nodes the fallback rewrote
    attention: int = 0  # StepAttention nodes the fallback rewrote
    heads: int = 0  # HeadRescore nodes the fallback rewrote

    def describe(self) -> str:
        if self.kernels:
            return f"kernels: {self.detail}"
        parts = [f"{self.nodes} matrices as MatMulNBits"] if self.nodes else []
        if self.attention:
            parts.append(f"{self.attention} attention layers as GroupQueryAttention")
        if self.heads:
            parts.append("the head's re-score as TopK and GatherBlockQuantized")
        return f"fallback: rewritten at load ({', '.join(parts)}; {self.detail})"


@dataclass
class OpenableGraph:
    """What ``ort.InferenceSession`` opens: a path or rewritten bytes, the arrays it must outlive."""

    source: str | bytes
    path: GraphPath | None  # None: the graph has no node of the library
    keep_alive: list[object] = field(default_factory=list)


def kernels_for_session(options: ort.SessionOptions) -> tuple[bool, str]:
    """Register the kernel library's ops on ``options`` where it can be used (not with
    ``CLIKA_KERNELS=off``): (True, its ISA), else (False, why not)."""
    try:
        from clika_runtime.kernels.library import register_kernels
    except ImportError:
        return False, "this install has no kernel library"
    status = register_kernels(options)
    return status.available, status.describe()


def prepare_graph(model_path: Path, options: ort.SessionOptions) -> OpenableGraph:
    """Make ``options`` able to run ``model_path`` (registering the kernels, or supplying the
    fallback's weights) and return what the session opens."""
    data = model_path.read_bytes()
    if not has_kernel_ops(data):
        return OpenableGraph(str(model_path), None)
    graph = prepare_bytes(data, model_path.parent, options, model_path.name)
    if graph.path is not None and graph.path.kernels:
        graph.source = str(model_path)  # ORT maps the file's external data itself
    else:
        options.add_session_config_entry(_EXTERNAL_FOLDER, str(model_path.parent.resolve()))
    return graph


def prepare_bytes(data: bytes, folder: Path, options: ort.SessionOptions, label: str) -> OpenableGraph:
    """``prepare_graph`` of a serialized graph whose external data (if any) is in ``folder``."""
    if not has_kernel_ops(data):
        return OpenableGraph(data, None)
    usable, detail = kernels_for_session(options)
    if usable:
        path = GraphPath(True, detail)
        log.info("%s: %s", label, path.describe())
        return OpenableGraph(data, path)
    rewritten = cached_rewrite(data, folder)
    names = list(rewritten.supplied)
    values = [ort.OrtValue.ortvalue_from_numpy(rewritten.supplied[n]) for n in names]
    if names:
        options.add_external_initializers(names, values)
    path = GraphPath(False, detail, rewritten.nodes, rewritten.attention, rewritten.heads)
    log.info("%s: %s", label, path.describe())
    # ORT reads supplied initializers in place and keeps no reference to them.
    arrays: list[np.ndarray] = list(rewritten.supplied.values())
    return OpenableGraph(rewritten.model, path, [arrays, values])


def inference_session(
    data: bytes, options: ort.SessionOptions | None = None, folder: Path | None = None
) -> ort.InferenceSession:
    """A CPU session on a serialized graph (external data in ``folder``), its GgufMatMul nodes
    on the kernels or rewritten; the session keeps what it reads (``session.kernel_path`` says
    which path runs)."""
    options = options or ort.SessionOptions()
    if folder is not None:
        options.add_session_config_entry(_EXTERNAL_FOLDER, str(Path(folder).resolve()))
    graph = prepare_bytes(data, Path(folder or "."), options, "graph")
    session = ort.InferenceSession(graph.source, options, providers=["CPUExecutionProvider"])
    session.kept_for_graph = graph.keep_alive
    session.kernel_path = graph.path
    return session
