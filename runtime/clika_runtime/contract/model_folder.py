"""Open an exported model folder: manifest, ONNX Runtime session, tokenizer, chat template source.

Everything the runtime needs comes from ``manifest.json``; file names are read
from it, never guessed. Problems surface as ``ManifestError`` naming the file
or field, before the first step runs.

Threads: ``threads`` sets ORT's intra-op pool (default: ORT's, one per physical core). Spinning
threads are off by default: on a machine shared with other work, spinning
workers lose more than they win (measured on a busy 2-core CPU).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from clika_runtime.contract.manifest import (
    KV_CACHE_DTYPES,
    MANIFEST_FILE,
    OPTIMUM_BUILDER,
    GraphSpec,
    Manifest,
    ManifestError,
    graph_key,
)
from clika_runtime.contract.rope_tables import RopeTable, RopeTableError, computed_initializers
from clika_runtime.kernels.fallback_graph import FallbackError
from clika_runtime.kernels.graph_loading import prepare_graph
from clika_runtime.kernels.proto_wire import WireError
from clika_runtime.kernels.transcode import TranscodeError
from clika_runtime.text.tokenizer import Tokenizer as TextTokenizer

DEFAULT_KV_MODE = "continuous"


@dataclass
class ModelFolder:
    """An opened model folder: its manifest, the step graph's session and the tokenizer."""

    path: Path
    manifest: Manifest
    kv_mode: str
    graph: GraphSpec
    session: ort.InferenceSession
    tokenizer: Tokenizer
    chat_template: str | None

    def text_tokenizer(self) -> TextTokenizer:
        """The folder's tokenizer with the manifest's special tokens: what the runtime encodes with."""
        return TextTokenizer.with_specials(self.tokenizer, self.manifest.tokenizer)


def session_options(threads: int | None = None, *, allow_spinning: bool = True) -> ort.SessionOptions:
    """ORT session options: ``threads`` intra-op threads (None: ORT's default).

    ``allow_spinning``: worker threads busy-wait for the next operator while a step
    runs (on by default: waking a sleeping thread for each of a decode step's
    hundreds of small operators made it 25-30% slower on 2 cores) and stop as soon
    as the step returns, so an idle model burns no CPU between steps or requests.
    Off: they always sleep, for machines whose cores are shared with other work.
    """
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0  # 0: ORT's default, one per physical core
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    spin = "1" if allow_spinning else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def open_model_folder(
    path: str | Path,
    *,
    kv_mode: str = DEFAULT_KV_MODE,
    kv_dtype: str = "float32",
    threads: int | None = None,
    allow_spinning: bool = True,
) -> ModelFolder:
    """Read the manifest, open the graph of ``kv_mode`` with a ``kv_dtype`` cache and load the tokenizer."""
    folder = Path(path)
    if not folder.is_dir():
        raise ManifestError(f"{folder} is not a model folder (no such directory)")
    manifest = Manifest.read(folder)
    graph = manifest.graphs.get(graph_key(kv_mode, kv_dtype))
    if graph is None:
        raise ManifestError(_missing_graph(manifest, kv_mode, kv_dtype))
    options = session_options(threads, allow_spinning=allow_spinning)
    session = open_session(folder / graph.file, options, manifest.rope_tables)
    check_graph_io(session, graph)
    return ModelFolder(
        path=folder,
        manifest=manifest,
        kv_mode=kv_mode,
        graph=graph,
        session=session,
        tokenizer=_load_tokenizer(folder / manifest.tokenizer.file),
        chat_template=_read_template(folder, manifest.chat_template_file),
    )


def kv_identity(folder: ModelFolder) -> str:
    """A key naming the exact graph a KV cache is computed by: the sha256 of the manifest (the
    export's source, precision and time), the opened graph's file name and that file's bytes.
    Saved KV carries it, so KV of another model, export or KV dtype is never read as this one's."""
    digest = hashlib.sha256(b"clika-kv\0")
    digest.update(hashlib.sha256((folder.path / MANIFEST_FILE).read_bytes()).digest())
    digest.update(folder.graph.file.encode() + b"\0")
    digest.update(hashlib.sha256((folder.path / folder.graph.file).read_bytes()).digest())
    return digest.hexdigest()


def _missing_graph(manifest: Manifest, kv_mode: str, kv_dtype: str) -> str:
    if kv_dtype not in KV_CACHE_DTYPES:
        return f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {kv_dtype!r}"
    continuous = manifest.graphs.get(DEFAULT_KV_MODE)
    if continuous is not None and continuous.builder == OPTIMUM_BUILDER:
        return (
            f"{manifest.architecture.family} was exported through optimum's ONNX exporter (no native "
            f"family builds it), which runs with a float32 continuous KV cache only, "
            f"not kv_cache_mode={kv_mode!r} with kv_cache_dtype={kv_dtype!r}"
        )
    if kv_dtype != "float32" and kv_mode in manifest.graphs:
        return f"the model has no {kv_dtype} KV cache graph for {kv_mode!r} (exported before it existed: export it again)"
    return f"the model has no {kv_mode!r} graph (it has: {', '.join(sorted(manifest.graphs))})"


def open_session(
    model_path: Path, options: ort.SessionOptions, rope_tables: Sequence[RopeTable]
) -> ort.InferenceSession:
    """An ORT CPU session on ``model_path`` whose placeholder initializers take ``rope_tables``
    computed (a manifest's ``rope_tables``, ``clika_runtime.contract.rope_tables``); a ManifestError
    when the graph or its weights cannot be loaded.

    Every session on a step graph opens here, so none runs on an empty placeholder. A graph
    that reads no computed tables (the vision tower, folders that store them) takes ``()``.
    """
    try:
        tables = computed_initializers(tuple(rope_tables))
    except RopeTableError as exc:
        raise ManifestError(f"manifest {exc}") from None
    supplied = [ort.OrtValue.ortvalue_from_numpy(array) for array in tables.values()]
    for name, value in zip(tables, supplied, strict=True):
        options.add_initializer(name, value)
    try:
        graph = prepare_graph(Path(model_path), options)
        session = ort.InferenceSession(graph.source, options, providers=["CPUExecutionProvider"])
    except (OSError, FallbackError, WireError, TranscodeError) as exc:
        raise ManifestError(f"{model_path.name} could not be loaded: {exc}") from None
    except Exception as exc:  # ORT raises several pybind exception types
        raise ManifestError(
            f"{model_path.name} could not be loaded (missing or corrupt file?): {exc}"
        ) from None
    # ORT reads supplied initializers in place and keeps no reference to them: they live as long
    # as the session (a freed table is a crash, not an error).
    session.supplied_initializers = _Supplied(tables, supplied, graph.keep_alive)
    # How its GgufMatMul nodes run (None: the graph has none), for the load log and `clika show`.
    session.kernel_path = graph.path
    return session


@dataclass(frozen=True, eq=False)
class _Supplied:
    arrays: dict[str, np.ndarray]
    values: list[ort.OrtValue]
    graph_arrays: list[object]


def check_graph_io(session: ort.InferenceSession, graph: GraphSpec) -> None:
    """The session's inputs and outputs must be exactly the ones the manifest names."""
    got_in = [i.name for i in session.get_inputs()]
    got_out = [o.name for o in session.get_outputs()]
    if set(got_in) != set(graph.inputs) or set(got_out) != set(graph.outputs):
        missing = sorted((set(graph.inputs) | set(graph.outputs)) - set(got_in) - set(got_out))
        extra = sorted((set(got_in) | set(got_out)) - set(graph.inputs) - set(graph.outputs))
        raise ManifestError(
            f"{graph.file} does not match the manifest: missing {missing}, unexpected {extra}"
        )


def _load_tokenizer(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers library raises its own exception type
        raise ManifestError(f"{path.name} could not be loaded: {exc}") from None


def _read_template(folder: Path, name: str | None) -> str | None:
    return (folder / name).read_text(encoding="utf-8") if name else None
