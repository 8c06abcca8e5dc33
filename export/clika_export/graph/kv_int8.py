"""An int8 KV cache twin of the continuous step graph, its scales calibrated on the model itself.

GroupQueryAttention (onnxruntime 1.32) can keep its cache as int8 with static
scales (``kv_cache_bit_width=8``, ``k_quant_type``/``v_quant_type``,
``k_scale``/``v_scale`` inputs), quantizing new keys and values as it writes
them. The twin is the continuous graph with those attributes, one scale per
layer, KV head and channel (``[1, kv_heads, 1, head_dim]``), and int8 cache
inputs/outputs; it reads the same weights file, so any precision gets one.
``add_int8_kv_graph`` then derives its paged twin (``paged:int8``, see
``clika_export.graph.paged_graph``) on the same scales.

Scales come from running the float-cache graph over a fixed mixed text
(``clika_export.calibration_text``) rendered through the model's own chat
template: the largest absolute key/value per channel, over every position
(the first ones included, where attention sinks put their largest keys),
times ``HEADROOM``, divided by 127. GroupQueryAttention saturates what lies
beyond (it does not wrap), so the headroom trades a little resolution for
text unlike the calibration's.

Measured with ``benchmarks/quant/quant_frontier.py --folder`` (2 threads, int4
models; KL is the mean KL divergence from the fp32 model's next token):

* SmolLM2-135M: float32 KV ppl 17.485, KL 0.010; int8 at headroom 1 17.637,
  0.017; at headroom 2 17.499, 0.014.
* Qwen2.5-Coder-0.5B: float32 KV 27.650, 0.003; headroom 1 27.524, 0.006;
  headroom 2 27.685, 0.005.
* Greedy agreement with fp32 over 32 tokens (mean common prefix), headroom 2:
  24.0 -> 17.4 (SmolLM2), 27.9 -> 24.45 (Qwen).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from clika_export.calibration_text import CALIBRATION_MESSAGES, CALIBRATION_TEXT
from clika_export.graph.builder import save_model
from clika_export.graph.gqa_form import read_continuous
from clika_export.graph.paged_graph import DEFAULT_BLOCK_SIZE, add_paged_graph
from clika_runtime.contract.manifest import MANIFEST_FILE, GraphSpec, Manifest, graph_key
from clika_runtime.contract.model_folder import open_session, session_options
from clika_runtime.contract.step_graph import GridLayout, StepRow, grid_layout, pack_step, text_only_media

INT8_KV_MODEL_FILE = "model_kv8.onnx"
INT8 = "int8"
# Calibration text is short: leave room for larger keys/values than it showed (see above).
HEADROOM = 2.0
# Bumped when the calibration or the twins change, so cached folders get them made again
# (2: the paged twin).
CALIBRATION_REVISION = 2
PRECISION_KEY = "kv_cache_int8"
# A channel that never moved during calibration still needs a usable scale.
SMALLEST_SCALE = 1e-6


class KVQuantError(ValueError):
    """A graph the int8 KV rewrite does not understand (the message names the node)."""


def ensure_int8_kv_graph(folder: Path, *, threads: int | None = None) -> Manifest:
    """The folder's manifest, after adding its int8 KV graph if it has none."""
    manifest = Manifest.read(folder)
    made = manifest.precision.get(PRECISION_KEY, {})
    twins = (graph_key("continuous", INT8), graph_key("paged", INT8))
    if all(key in manifest.graphs for key in twins) and made.get("revision") == CALIBRATION_REVISION:
        return manifest
    return add_int8_kv_graph(folder, threads=threads)


def add_int8_kv_graph(folder: Path, *, threads: int | None = None) -> Manifest:
    """Calibrate the KV scales, write the int8 KV twin of the continuous graph, and name it in the manifest.

    The manifest is replaced in one rename, so a reader sees the folder before
    or after, never half-written.
    """
    folder = Path(folder)
    manifest = Manifest.read(folder)
    continuous = manifest.graphs["continuous"]
    token_ids = calibration_ids(folder)
    scales = kv_scales(folder, manifest, token_ids, threads=threads)
    spec = write_int8_kv_graph(folder / continuous.file, folder / INT8_KV_MODEL_FILE, continuous, scales)
    made = {
        "revision": CALIBRATION_REVISION,
        "scales": "static, per layer, KV head and channel: largest |value| x headroom / 127",
        "headroom": HEADROOM,
        "calibration_tokens": len(token_ids),
    }
    manifest = dataclasses.replace(
        manifest,
        graphs={**manifest.graphs, graph_key("continuous", INT8): spec},
        precision={**manifest.precision, PRECISION_KEY: made},
    )
    partial = folder / f".{MANIFEST_FILE}.{os.getpid()}.partial"
    partial.write_text(manifest.to_json() + "\n", encoding="utf-8")
    os.replace(partial, folder / MANIFEST_FILE)
    paged = manifest.graphs.get("paged")
    block_size = (paged.kv.block_size if paged else None) or DEFAULT_BLOCK_SIZE
    return add_paged_graph(folder, block_size=block_size, kv_dtype=INT8)  # the paged mode's int8 twin


def calibration_ids(folder: Path) -> list[int]:
    """The calibration conversation as the model would see it (its chat template, its tokenizer)."""
    from clika_runtime import modelverse

    model = modelverse.load(folder, threads=1)
    try:
        text = model.render(list(CALIBRATION_MESSAGES)) if model.has_chat_template else CALIBRATION_TEXT
        return model.tokenizer.encode(text)[: model.max_seq]
    finally:
        model.close()


def kv_scales(
    folder: Path, manifest: Manifest, token_ids: Sequence[int], *, threads: int | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer, the (key, value) scales ``[1, kv_heads, 1, head_dim]`` that map the largest seen value to 127."""
    if not token_ids:
        raise KVQuantError("KV calibration needs at least one token")
    graph = manifest.graphs["continuous"]
    arch = manifest.architecture
    session = open_session(folder / graph.file, session_options(threads), manifest.rope_tables)
    count = len(token_ids)
    shape = (1, arch.num_kv_heads, count, arch.head_dim)
    binding = session.io_binding()
    # Folders exported before the token_cell form take the flat grid maps.
    layout = grid_layout(i.name for i in session.get_inputs()) or GridLayout.CELLS
    feeds = pack_step([StepRow(0, list(token_ids))], capacity=count).feeds(layout)
    for name, array in {**feeds, **text_only_media(session.get_inputs())}.items():
        binding.bind_cpu_input(name, np.ascontiguousarray(array))
    caches: list[tuple[np.ndarray, np.ndarray]] = []
    for layer in range(arch.num_layers):
        pair = (np.zeros(shape, np.float32), np.zeros(shape, np.float32))
        names = ((graph.kv.past_key, graph.kv.present_key), (graph.kv.past_value, graph.kv.present_value))
        for cache, (past, present) in zip(pair, names, strict=True):
            binding.bind_cpu_input(past.format(layer=layer), cache)
            binding.bind_output(present.format(layer=layer), "cpu", 0, np.float32, shape, cache.ctypes.data)
        caches.append(pair)
    binding.bind_output(graph.logits_output)
    session.run_with_iobinding(binding)
    return [(_channel_scale(key), _channel_scale(value)) for key, value in caches]


def _channel_scale(cache: np.ndarray) -> np.ndarray:
    largest = np.abs(cache).max(axis=(0, 2), keepdims=True)
    if not np.all(np.isfinite(largest)):
        raise KVQuantError("KV calibration produced non-finite keys or values")
    return np.maximum(largest * HEADROOM / 127.0, SMALLEST_SCALE).astype(np.float32)


def write_int8_kv_graph(
    continuous: Path, out: Path, spec: GraphSpec, scales: Sequence[tuple[np.ndarray, np.ndarray]]
) -> GraphSpec:
    """Write ``out``: ``continuous`` with an int8 cache (sharing its weights file); returns its spec."""
    model = read_continuous(continuous)
    graph = model.graph
    layers = {spec.kv.past_key.format(layer=i): i for i in range(len(scales))}
    quantized = 0
    for node in graph.node:
        if node.op_type != "GroupQueryAttention":
            continue
        layer = layers.get(node.input[3])
        if layer is None:
            raise KVQuantError(f"{node.name}: its past key {node.input[3]!r} is not a layer's KV cache input")
        _quantize_attention(graph, node, layer, scales[layer])
        quantized += 1
    if quantized != len(scales):
        raise KVQuantError(
            f"{continuous.name} has {quantized} GroupQueryAttention nodes, expected {len(scales)}"
        )
    kv_names = {spec.kv.past_key, spec.kv.past_value, spec.kv.present_key, spec.kv.present_value}
    cache_io = {name.format(layer=i) for name in kv_names for i in range(len(scales))}
    for value in [*graph.input, *graph.output]:
        if value.name in cache_io:
            value.type.tensor_type.elem_type = TensorProto.INT8
    model.doc_string = "clika step graph with an int8 KV cache (static per-channel scales)"
    partial = out.parent / f".{out.name}.{os.getpid()}.partial"
    save_model(model, partial)
    os.replace(partial, out)
    return dataclasses.replace(spec, file=out.name, kv=dataclasses.replace(spec.kv, dtype=INT8))


def _quantize_attention(
    graph: onnx.GraphProto, node: onnx.NodeProto, layer: int, scales: tuple[np.ndarray, np.ndarray]
) -> None:
    present = {a.name for a in node.attribute}
    if present & {"kv_cache_bit_width", "k_quant_type", "v_quant_type"}:
        raise KVQuantError(f"{node.name}: its KV cache is already quantized")
    names = (f"kv_scale.key.{layer}", f"kv_scale.value.{layer}")
    for name, scale in zip(names, scales, strict=True):
        graph.initializer.append(numpy_helper.from_array(scale, name))
    while len(node.input) < 14:  # k_scale and v_scale are inputs 12 and 13
        node.input.append("")
    node.input[12], node.input[13] = names
    node.attribute.extend(
        [
            helper.make_attribute("k_quant_type", "PER_CHANNEL"),
            helper.make_attribute("v_quant_type", "PER_CHANNEL"),
            helper.make_attribute("kv_cache_bit_width", 8),
        ]
    )
