"""The fallback export: a Hugging Face architecture no native family builds, through optimum.

optimum's exporter (``optimum_run``, on the pinned ``toolchain``) writes a
past-KV graph; its MatMul weights then go through the same weight pass as a
native export (``clika_quant.quantize_model``: MatMulNBits int4/int8, the head
and the token table at 8 bits by default), and the folder gets the tokenizer,
the chat template and a manifest whose graph says ``"builder": "optimum"`` (the
runtime drives it with ``clika_runtime.engine.past_kv_runner``, continuous
float32 KV only). The caller (``clika_export.api.export``) owns the temporary
folder and publishes it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import types
from pathlib import Path
from typing import Any

import onnx

from clika_export.checkpoint import CheckpointError
from clika_export.fallback.optimum_run import TEXT_GENERATION_TYPES, run_optimum_export
from clika_export.fallback.past_kv_graph import PastKVGraph, describe, split_gemm_bias, weight_matrices
from clika_export.fallback.toolchain import toolchain_dir
from clika_export.manifest_parts import TEMPLATE_FILE, provenance, tokenizer_spec, write_text_files
from clika_export.progress import Progress
from clika_export.readers.hf import model_type, read_config, text_parts
from clika_export.template_check import check_chat_template
from clika_runtime.contract.manifest import (
    OPTIMUM_BUILDER,
    Architecture,
    GraphSpec,
    KVSpec,
    Manifest,
)
from clika_runtime.contract.past_kv_graph import LOGITS, PAST_KEY, PAST_VALUE, PRESENT_KEY, PRESENT_VALUE

MODEL_FILE = "model.onnx"
DEFAULT_MAX_CONTEXT = 32768
# Config keys that name the same fact across architectures (transformers' own names differ).
_HIDDEN = ("hidden_size", "n_embd", "d_model")
_INTERMEDIATE = ("intermediate_size", "n_inner", "ffn_dim")
_HEADS = ("num_attention_heads", "n_head", "num_heads")
_POSITIONS = ("max_position_embeddings", "n_positions", "seq_length", "n_ctx")
_EPS = ("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", "norm_eps")


def optimum_covers(name: str) -> bool:
    """True when optimum's exporter builds ``model_type`` ``name`` for text generation."""
    return name in TEXT_GENERATION_TYPES


def build_with_optimum(
    source: Path,
    work: Path,
    precision: str,
    context_window: int | None,
    report: Progress,
    *,
    quant_options: dict[str, Any] | None = None,
    quantizer: Any = None,
) -> Manifest:
    """Write the model folder of Hugging Face folder ``source`` into ``work`` through optimum."""
    config = read_config(source)
    name = model_type(config)
    if not optimum_covers(name):
        raise CheckpointError(f"architecture {name!r} is not one optimum's ONNX exporter builds")
    if importlib.util.find_spec("torch") is None:
        raise CheckpointError(
            f"{name} is built by optimum's ONNX exporter, which needs torch: "
            f"pip install 'clika-runtime[optimum]'"
        )
    text = types.SimpleNamespace(**text_parts(source, config))
    check_chat_template(text)
    context = _context_window(config, context_window)
    with report.stage("fetching optimum's ONNX exporter (once)"):
        site = toolchain_dir(progress=report.enabled)
    with report.stage(f"exporting {name} with optimum's ONNX exporter"):
        raw = run_optimum_export(source, work / "optimum", site, name)
    model = onnx.load(str(raw), load_external_data=False)
    graph = describe(model, name)
    if split_gemm_bias(model):
        onnx.save(model, str(raw))  # the nodes only: external weights stay where they are
    matrices = weight_matrices(model)
    for produced in raw.parent.glob(f"{raw.name}*"):  # the graph and any external data beside it
        shutil.move(str(produced), work / produced.name.replace(raw.name, MODEL_FILE, 1))
    shutil.rmtree(work / "optimum")
    record: dict[str, Any] = {"weights": "fp32", "matrices": matrices}
    quant_options = _fallback_options(quant_options)
    if precision != "fp32":
        with report.steps(f"quantizing to {precision}", len(matrices), unit="matrix") as on_matrix:
            record = quantizer(
                work / MODEL_FILE,
                None,
                precision,
                matrices=matrices,
                options=quant_options,
                on_matrix=on_matrix,
            )
    with report.stage("writing the model folder"):
        manifest = _manifest(config, name, graph, text, context, record)
        write_text_files(work, text)
        manifest.write(work)
        Manifest.read(work)  # the folder must read back as a complete model
    return manifest


def _fallback_options(asked: dict[str, Any] | None) -> dict[str, Any]:
    """The weight pass's options for an optimum graph.

    Two of the pass's parts read activations as rows of packed tokens ``[T, K]`` (a Gemm): the
    head's fp32 re-scoring of its best logits and the float offsets of asymmetric 4-bit blocks.
    optimum's graphs keep a batch axis ``[1, n, K]``, so their head is the plain MatMulNBits and
    asymmetric blocks keep integer zero points (MatMulNBits applies them itself).
    """
    options = {**(asked or {}), "head_rescore_top_k": 0}
    if options.get("zero_point", "offset") == "offset":
        options["zero_point"] = "uint8"
    return options


def _context_window(config: dict[str, Any], requested: int | None) -> int:
    limit = _first_int(config, _POSITIONS, 2048)
    if requested is None:
        return min(limit, DEFAULT_MAX_CONTEXT)
    if not 1 <= requested <= limit:
        raise CheckpointError(f"context window {requested} is outside 1..{limit} (the model's positions)")
    return requested


def _first_int(config: dict[str, Any], keys: tuple[str, ...], default: int) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def _architecture(config: dict[str, Any], name: str, graph: PastKVGraph) -> Architecture:
    """The manifest's architecture facts: the KV shape from the graph, the rest from the config."""
    hidden = _first_int(config, _HIDDEN, graph.num_kv_heads * graph.head_dim)
    eps = next((config[k] for k in _EPS if isinstance(config.get(k), float)), 1e-5)
    theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta") or 10000.0
    return Architecture(
        family=name,
        num_layers=graph.num_layers,
        hidden_size=hidden,
        num_heads=_first_int(config, _HEADS, graph.num_kv_heads),
        num_kv_heads=graph.num_kv_heads,
        head_dim=graph.head_dim,
        intermediate_size=_first_int(config, _INTERMEDIATE, 4 * hidden),
        vocab_size=graph.vocab_size,
        rms_norm_eps=float(eps),
        rope_theta=float(theta) if isinstance(theta, (int, float)) else 10000.0,
        max_position_embeddings=_first_int(config, _POSITIONS, 2048),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
    )


def _manifest(
    config: dict[str, Any],
    name: str,
    graph: PastKVGraph,
    text: types.SimpleNamespace,
    context: int,
    record: dict[str, Any],
) -> Manifest:
    kv = KVSpec(
        layout="BNSH",
        dtype="float32",
        past_key=PAST_KEY,
        past_value=PAST_VALUE,
        present_key=PRESENT_KEY,
        present_value=PRESENT_VALUE,
    )
    spec = GraphSpec(
        file=MODEL_FILE,
        inputs=graph.inputs,
        outputs=graph.outputs,
        kv=kv,
        logits_output=LOGITS,
        builder=OPTIMUM_BUILDER,
    )
    return Manifest(
        architecture=_architecture(config, name, graph),
        context_window=context,
        graphs={"continuous": spec},
        tokenizer=tokenizer_spec(text),
        precision=json.loads(json.dumps(record)),
        provenance=provenance(text),
        generation_defaults=dict(text.generation_defaults),
        chat_template_file=TEMPLATE_FILE if text.chat_template else None,
    )
