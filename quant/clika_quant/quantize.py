"""The weight pass: a float step graph in, the same graph with quantized weights out.

``quantize_model(model_path, checkpoint, precision, matrices=...)`` is the
export pipeline's hook (it rewrites ``model.onnx`` and its data file in place
and returns the manifest's ``precision`` record); ``quantize_proto`` does the
same on an in-memory ``ModelProto``.

What each matrix becomes (see ``options`` for the measurements behind it):

* linear layers: GGUF blocks transcoded exactly (Q4_0/Q4_1/Q4_K as 4 bits,
  Q5_*/Q6_K/Q8_0 as 8 bits), float weights searched to 4 bits (int4) or
  rounded to 8 bits (int8); MatMulNBits with int8 compute;
* token table and output head: their own choice, 8 bits by default (GGUF
  blocks exact); a tied table is stored once and read by both
  GatherBlockQuantized and the head's MatMulNBits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from clika_quant.choose import plan_matrix
from clika_quant.graph_pass import Rewriter, check_gemm_is_plain
from clika_quant.model_file import load_graph, save_graph
from clika_quant.nibbles import NibbleSplit, layer_split_bytes, split_layer_blocks, split_nibbles
from clika_quant.options import QuantError, QuantOptions, check_precision
from clika_quant.q4_0_scan import Q4_0Scan, q4_0_scan
from clika_quant.rtn import quantize_rtn
from clika_quant.twin_table import read_table_from_head
from clika_runtime.kernels.blocks import BlockQuantized
from clika_runtime.kernels.gguf_matmul import DOMAIN, GGML_TYPE_IDS, LEVEL_PRECISIONS, OP_TYPE, OPSET_VERSION
from clika_runtime.kernels.transcode import TRANSCODABLE

EMBED, HEAD = "embed", "lm_head"
_TABLE_BITS = {"auto": 8, "int8": 8, "int4": 4, "fp32": None}


def quantize_model(
    model_path: str | Path,
    checkpoint: Any,
    precision: str,
    matrices: dict[str, dict[str, Any]] | None = None,
    options: QuantOptions | dict[str, Any] | None = None,
    on_matrix: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Quantize the graph at ``model_path`` (and its external data file) in place; return the record.

    ``on_matrix`` is told each matrix's name once it is quantized (for a progress bar)."""
    model_path = Path(model_path)
    check_precision(precision)
    if precision == "fp32":
        return quantize_proto(onnx.ModelProto(), checkpoint, precision, {}, options)[1]
    model, load = load_graph(model_path)
    data_names = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    data_name = data_names.pop() if len(data_names) == 1 else f"{model_path.name}.data"
    arrays: dict[str, np.ndarray] = {}
    model, record = quantize_proto(model, checkpoint, precision, matrices, options, load, arrays, on_matrix)
    save_graph(model, model_path, data_name, load, arrays)
    return record


def quantize_proto(
    model: onnx.ModelProto,
    checkpoint: Any,
    precision: str,
    matrices: dict[str, dict[str, Any]] | None = None,
    options: QuantOptions | dict[str, Any] | None = None,
    load: Callable[[str], np.ndarray] | None = None,
    arrays: dict[str, np.ndarray] | None = None,
    on_matrix: Callable[[str], None] | None = None,
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Quantize the weights of ``model`` (modified in place and returned) and describe what was done.

    ``checkpoint`` supplies GGUF blocks through ``checkpoint.raw(name)`` (None
    or a checkpoint without blocks: everything is quantized from float).
    ``matrices`` maps initializer names to ``{"roles", "nodes", "layout",
    "sources", "layer"}`` as the graph builder records them; when None it is
    inferred from the graph (every MatMul/Gemm/Gather reading a 2-D float
    initializer). When ``arrays`` is given, new initializers are left empty in
    the graph and their values put there instead (for a writer that streams
    them to an external data file).
    """
    check_precision(precision)
    options = QuantOptions.for_precision(precision, options)
    matrices = matrices if matrices is not None else infer_matrices(model)
    record: dict[str, Any] = {
        "weights": precision,
        "scheme": options.describe(precision),
        "options": options.to_dict(),
        "matrices": {},
    }
    if precision == "fp32":
        return model, summarize(record)
    load = load or _inline_loader(model)
    raw = _raw_source(checkpoint)
    rewriter = Rewriter(model.graph, keep_arrays=arrays is not None)
    twin = None
    if options.table_from_head and options.transcode and options.embedding == options.head == "auto":
        matrices, twin = read_table_from_head(matrices, raw)
        if twin is not None and twin["read_from_head"]:
            rewriter.removed_initializers.add(twin["table"])
    layers = [info["layer"] for info in matrices.values() if info.get("layer") is not None]
    num_layers = max(layers) + 1 if layers else None
    for name, info in matrices.items():
        record["matrices"][name] = _quantize_matrix(
            rewriter, name, {**info, "num_layers": num_layers}, precision, options, load, raw
        )
        if on_matrix is not None:
            on_matrix(name)
    rewriter.apply()
    if any(node.op_type == OP_TYPE and node.domain == DOMAIN for node in model.graph.node):
        if DOMAIN not in {o.domain for o in model.opset_import}:
            model.opset_import.append(onnx.helper.make_opsetid(DOMAIN, OPSET_VERSION))
    if arrays is not None:
        arrays.update(rewriter.arrays)
    if twin is not None:
        record["table_from_head"] = twin
    return model, summarize(record)


def _quantize_matrix(rewriter, name, info, precision, options, load, raw) -> dict[str, Any]:
    roles = list(info["roles"])
    bits = _bits_for(roles, precision, options)
    base = name[: -len(".weight")] if name.endswith(".weight") else name
    entry: dict[str, Any] = {"roles": roles, "layer": info.get("layer")}

    def weight_nk() -> np.ndarray:
        array = np.asarray(load(name), np.float32)
        return np.ascontiguousarray(array.T) if info["layout"] == "in_out" else array

    sources = list(info.get("sources") or [name])
    if (
        bits == 8
        and options.int8_op == "dqmm"
        and not set(roles) & {EMBED, HEAD}
        and not _all_exact(sources, raw, options)
    ):
        weight_kn = weight_nk().T
        for node_name in info["nodes"]:
            rewriter.dqmm(rewriter.node(node_name), weight_kn, base)
        rewriter.removed_initializers.add(name)
        return {**entry, "ops": ["DynamicQuantizeMatMul"], "bits": 8, "method": "per-column int8"}
    plan = plan_matrix(weight_nk, sources, raw, bits, options)
    if plan.is_float:
        return {**entry, "ops": ["fp32"]}
    levels = [
        options.accuracy_for(
            g.matrix.bits, HEAD in roles, roles[0], info.get("layer"), info.get("num_layers")
        )
        for g in plan.groups
    ]
    # At level 0 the head is exact already; re-scoring only undoes int8 activations.
    rescore = options.head_rescore_top_k if HEAD in roles and levels[0] != 0 else 0
    scan = _head_scan(plan, options, levels[0], raw) if rescore else None
    if isinstance(scan, NibbleSplit):
        rewriter.splits[base] = scan  # the table's rows (when tied) come from the same two parts
    splits = _layer_splits(plan, roles, options)
    gguf = None if splits else _gguf_form(name, sources, raw, roles, plan, levels, options)
    if gguf is not None:
        return _as_gguf_matmul(rewriter, name, info, entry, plan, base, gguf, levels)
    ops = []
    for node_name in info["nodes"]:
        node = rewriter.node(node_name)
        if node.op_type == "Gather":
            if len(plan.groups) != 1:
                raise QuantError(
                    f"{name}: a token table must have one quantized form, got {len(plan.groups)}"
                )
            rewriter.gather(node, plan.groups[0], base)
            ops.append("GatherBlockQuantized")
            continue
        check_matmul_consumer(name, node)
        if rewriter.matmul(node, plan.groups, base, levels, rescore, scan, splits):
            entry["rescore_top_k"] = rescore
            if scan is not None:
                entry["scan"] = _scan_record(scan)
        ops.append("MatMulNBits")
    rewriter.removed_initializers.add(name)
    groups = [{**g.record(), "accuracy_level": level} for g, level in zip(plan.groups, levels, strict=True)]
    for group, split in zip(groups, splits or [], strict=False):
        if split is not None:
            group.update(
                stored=f"split: high 4 bits + low {split.low.bits} bits", bytes=layer_split_bytes(split)
            )
    entry.update(ops=ops, groups=groups)
    return entry


def _gguf_form(name, sources, raw, roles, plan, levels, options: QuantOptions):
    """Per group of the plan, the GGUF blocks ``GgufMatMul`` reads (uint8 ``[N, row_bytes]``:
    its sources' rows, one GGUF type) and that type; or None where the matrix keeps the
    MatMulNBits form (the token table and head, a group mixing types, accuracy levels 1-3,
    uncentred zero points, 8-bit layers a requantizing pass may change, the option off).
    A fused matrix whose parts differ in type (Q4_K query and key, Q6_K value) gets one
    part a group, as the MatMulNBits form does."""
    # The runtime's MatMulNBits form of the op centres its zero points: only that option's form.
    if not (options.gguf_matmul and options.transcode and options.center_zero_points):
        return None
    if set(roles) & {EMBED, HEAD} or any(level not in LEVEL_PRECISIONS for level in levels):
        return None
    if options.requantize_target_kl is not None and any(g.matrix.bits == 8 for g in plan.groups):
        return None  # ``sensitivity_bits`` requantizes 8-bit layers from their MatMulNBits form
    parts = []
    for group in plan.groups:
        blocks = [raw(s) for s in group.sources]
        types = {b.ggml_type if b is not None else None for b in blocks}
        if len(types) != 1 or next(iter(types)) not in GGML_TYPE_IDS:
            return None
        check_finite_blocks(name, group.sources, blocks, group.matrix)
        data = [np.asarray(b.data, np.uint8) for b in blocks]
        parts.append(((data[0] if len(data) == 1 else np.concatenate(data)), blocks[0].ggml_type))
    return parts


def check_matmul_consumer(name: str, node) -> None:
    """A matrix product the pass can rewrite: a MatMul, or a plain ``x @ W^T`` Gemm."""
    if node.op_type == "Gemm":
        check_gemm_is_plain(node)
    elif node.op_type != "MatMul":
        raise QuantError(
            f"{name}: its consumer {node.name} is a {node.op_type}, which this pass cannot rewrite"
        )


def check_finite_blocks(name: str, sources: list[str], blocks, matrix: BlockQuantized) -> None:
    """NaN or inf scales (or minimums) make every product of the block NaN: refused, naming the
    tensor; subnormal fp16 scales are values like any other and are kept."""
    bad = ~np.isfinite(matrix.scales).all(axis=1)
    if matrix.offsets is not None:
        bad |= ~np.isfinite(matrix.offsets).all(axis=1)
    if not bad.any():
        return
    row = int(np.argmax(bad))
    start, index = 0, 0
    while row >= start + blocks[index].shape[0]:
        start += blocks[index].shape[0]
        index += 1
    source = sources[index]
    raise QuantError(
        f"{name}: GGUF tensor {source} has a NaN or infinite scale in row {row - start} "
        f"(a corrupt file: its products would be NaN)"
    )


def _as_gguf_matmul(rewriter, name, info, entry, plan, base, parts, levels) -> dict[str, Any]:
    precisions = [LEVEL_PRECISIONS[level] for level in levels]
    for node_name in info["nodes"]:
        node = rewriter.node(node_name)
        check_matmul_consumer(name, node)
        rewriter.gguf_matmul(node, parts, plan.groups[0].matrix.k, base, precisions)
    rewriter.removed_initializers.add(name)
    records = [
        {
            **group.record(),
            "accuracy_level": level,
            "weight_format": f"gguf {ggml_type}",
            "kernel_precision": precision,
            "bytes": int(data.nbytes),
        }
        for group, level, precision, (data, ggml_type) in zip(
            plan.groups, levels, precisions, parts, strict=True
        )
    ]
    return {**entry, "ops": [OP_TYPE] * len(info["nodes"]), "groups": records}


def with_level(group: dict[str, Any], level: int) -> dict[str, Any]:
    """A group record computed at another accuracy level (and its GgufMatMul precision)."""
    changed = {**group, "accuracy_level": level}
    if "kernel_precision" in group:
        changed["kernel_precision"] = LEVEL_PRECISIONS[level]
    return changed


def _layer_splits(plan, roles: list[str], options: QuantOptions) -> list[NibbleSplit | None] | None:
    """Per group of a layer matrix, its 4 + 2-bit split where ``split_layer_blocks`` allows it."""
    if not options.split_layer_blocks or set(roles) & {EMBED, HEAD}:
        return None
    splits = [split_layer_blocks(g.matrix) for g in plan.groups]
    return splits if any(s is not None for s in splits) else None


def _head_scan(
    plan, options: QuantOptions, level: int, raw: Callable[[str], Any]
) -> BlockQuantized | NibbleSplit | Q4_0Scan | None:
    """The 4-bit form an 8-bit head ranks its candidates with (its k best are re-scored exactly).

    For a GGUF's head, whose layers the pass writes as ``GgufMatMul``: a 4-bit copy in Q4_0
    blocks that op reads in place (``q4_0_scan``). Elsewhere its own high bits (``nibbles``:
    stored once) where the split is exact and its blocks as wide as a copy's, else a copy in
    MatMulNBits codes."""
    if options.head_scan_bits != 4 or len(plan.groups) != 1 or plan.groups[0].matrix.bits != 8:
        return None
    matrix = plan.groups[0].matrix
    if matrix.k % matrix.block_size or matrix.float_zero_points:
        return None
    kernels_form = options.gguf_matmul and options.transcode and level in LEVEL_PRECISIONS
    kernels_copy = kernels_form and all(raw(source) is not None for source in plan.groups[0].sources)
    # "auto": the Q4_0 copy where the kernels read it: it ranks in 4.5 bits a weight where the
    # split reads 5 and its scales twice (MatMulNBits' fp32 scales, then the low bits' mean),
    # re-scores from one gather instead of seven nodes, and nothing of it is pre-packed.
    # Decode step 5.92 against 7.08 ms (SmolLM2-135M), 15.0 against 17.8 ms (Qwen2.5-Coder-0.5B,
    # peak RSS of `clika generate` 629 against 758 MiB) for 16 MB and 73 MB more on disk.
    # Otherwise the split only where its blocks are as wide as the copy's; a Q6_K head's
    # 16-wide blocks make the high bits read 175 MB (and the scales again) where a copy reads
    # 153 MB (Qwen2.5-Coder-1.5B: slower decode in a measured run, README "Folder size").
    wide_enough = matrix.block_size >= options.block_size
    if options.head_scan == "nibbles" or (options.head_scan == "auto" and wide_enough and not kernels_copy):
        split = split_nibbles(matrix)
        if split is not None:
            return split
    weights = matrix.dequantize()
    if kernels_copy:
        scan = q4_0_scan(weights)
        if scan is not None:
            return scan
    # Integer zero points, no offsets: the scan only ranks candidates, and offsets would cost a Gemm.
    return quantize_rtn(weights, 4, options.block_size, "uint8")


def _scan_record(scan: BlockQuantized | NibbleSplit | Q4_0Scan) -> dict[str, Any]:
    if isinstance(scan, Q4_0Scan):
        return {
            "bits": 4,
            "block_size": 32,
            "form": "4-bit copy",
            "weight_format": "gguf Q4_0",
            "bytes": scan.nbytes(),
        }
    if isinstance(scan, NibbleSplit):
        return {
            "bits": 4,
            "block_size": scan.high.block_size,
            "form": f"the head's high 4 bits (stored split: 4 + {scan.low.bits} bits a weight)",
            "low_shift": scan.shift,
            "bytes": 0,  # no copy: the head's own storage
            "stored_bytes": scan.nbytes(),
            "read_bytes": scan.scan_bytes(),
        }
    return {"bits": scan.bits, "block_size": scan.block_size, "form": "4-bit copy", "bytes": scan.nbytes()}


def _bits_for(roles: list[str], precision: str, options: QuantOptions) -> int | None:
    """Target bits of float weights (None: keep float)."""
    if HEAD in roles:
        if EMBED in roles and options.embedding not in ("auto", options.head):
            raise QuantError(
                f"the token table is tied to the output head: one precision serves both "
                f"(embedding={options.embedding!r}, head={options.head!r})"
            )
        return _TABLE_BITS[options.head]
    if EMBED in roles:
        return _TABLE_BITS[options.embedding]
    return 4 if precision == "int4" else 8


def _all_exact(sources: list[str], raw, options: QuantOptions) -> bool:
    if not options.transcode:
        return False
    blocks = [raw(s) for s in sources]
    return all(b is not None and b.ggml_type in TRANSCODABLE for b in blocks)


def _raw_source(checkpoint: Any) -> Callable[[str], Any]:
    if checkpoint is None or not hasattr(checkpoint, "raw"):
        return lambda name: None
    return checkpoint.raw


def _inline_loader(model: onnx.ModelProto) -> Callable[[str], np.ndarray]:
    tensors = {t.name: t for t in model.graph.initializer}
    return lambda name: numpy_helper.to_array(tensors[name])


def infer_matrices(model: onnx.ModelProto) -> dict[str, dict[str, Any]]:
    """Weight matrices of a graph that carries no builder record: 2-D float initializers read by
    MatMul (as B), Gemm (as B with transB=1) or Gather (as the table)."""
    inits = {
        t.name: t
        for t in model.graph.initializer
        if len(t.dims) == 2 and t.data_type == onnx.TensorProto.FLOAT
    }
    found: dict[str, dict[str, Any]] = {}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in inits:
            name, role, layout = node.input[1], "linear", "in_out"
        elif node.op_type == "Gemm" and len(node.input) > 1 and node.input[1] in inits:
            name, role, layout = node.input[1], HEAD, "out_in"
        elif node.op_type == "Gather" and node.input[0] in inits:
            name, role, layout = node.input[0], EMBED, "out_in"
        else:
            continue
        entry = found.setdefault(
            name, {"roles": [], "nodes": [], "layout": layout, "sources": [name], "layer": None}
        )
        if entry["layout"] != layout:
            entry["layout"] = "out_in"  # a tied table: Gather reads rows, Gemm reads it transposed
        entry["roles"].append(role)
        entry["nodes"].append(node.name)
    return found


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """Counts of ops/bits/methods and the weight bytes, for the manifest's reader (again after a
    later pass changed the record's groups)."""
    kinds: Counter[str] = Counter()
    levels: Counter[str] = Counter()
    total = 0
    for entry in record["matrices"].values():
        for group in entry.get("groups", []):
            method = group["method"] if isinstance(group["method"], str) else "mixed"
            kinds[f"{group['bits']}-bit block {group['block_size']} ({method})"] += 1
            levels[f"{group['bits']}-bit level {group['accuracy_level']}"] += 1
            total += group["bytes"]
        total += entry.get("scan", {}).get("bytes", 0)
        if entry.get("ops") in (["fp32"], ["DynamicQuantizeMatMul"]):
            kinds[entry["ops"][0]] += 1
    record["summary"] = {
        "plainly": _plainly(record["matrices"]),
        "forms": dict(sorted(kinds.items())),
        "accuracy_levels": dict(sorted(levels.items())),
        "quantized_bytes": total,
    }
    for role, key in ((EMBED, "embedding"), (HEAD, "lm_head")):
        for name, entry in record["matrices"].items():
            if role in entry["roles"]:
                record[key] = {
                    "matrix": name,
                    "tied": {EMBED, HEAD} <= set(entry["roles"]),
                    "ops": entry["ops"],
                }
                if key == "lm_head" and "rescore_top_k" in entry:
                    record[key]["rescore_top_k"] = entry["rescore_top_k"]
    return record


def _plainly(matrices: dict[str, Any]) -> str:
    """What is stored and how it is computed, in words: a precision's name says neither exactly
    (int8 of a Q4_1 GGUF stores the same 4-bit blocks as int4 and only computes them in fp32)."""
    stored: Counter[int] = Counter()
    computed: Counter[str] = Counter()
    for entry in matrices.values():
        for group in entry.get("groups", []):
            stored[group["bits"]] += group["bytes"]
            if {"MatMulNBits", OP_TYPE} & set(entry.get("ops", [])):
                computed["in fp32" if group["accuracy_level"] == 0 else "with int8 activations"] += 1
    kept = ", ".join(f"{bits}-bit {size / 2**20:.1f} MiB" for bits, size in sorted(stored.items()))
    how = ", ".join(f"{count} {kind}" for kind, count in sorted(computed.items()))
    return f"stored: {kept or 'fp32 weights'}; matrix products: {how or 'fp32'}"
