"""Which 8-bit layer matrices may become 4-bit, chosen by the error each adds.

A decode step at one token is bound by the weight bytes it reads, and a GGUF's 5-, 6- and
8-bit blocks (Q5_0, Q6_K, Q8_0) are stored as 8-bit MatMulNBits: 8 bits a weight plus the
scales. Requantizing such a matrix to 4 bits (blocks of 32, integer zero points, the
least-squares search) halves what it reads, but it is no longer the source's exact weights,
so it is opt-in (``QuantOptions.requantize_target_kl``) and measured per matrix:

1. each candidate alone at 4 bits, the rest as stored: the mean KL divergence it adds on the
   calibration conversation, through the folder's own graph (``Probe``);
2. candidates taken the least measured KL per byte saved first (ties by name) while their
   KLs add up to at most the target;
3. the chosen mix measured as a whole; while that is over the target (KL does not add up),
   the last taken is given back and the mix measured again.

Candidates are layer matrices' 8-bit groups without block offsets (Q5_1/Q5_K keep theirs)
and not stored split; the token table and the head keep their own choice. The same graph,
text and threads give the same KL figures (ORT's kernels are deterministic per element), so
the choice is reproducible. Every candidate's measured KL and bytes, the choice and the KL
measured for it go into the manifest's precision record (``bits_sensitivity``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from clika_quant.graph_pass import Rewriter
from clika_quant.model_file import ExternalWeights, load_graph, save_graph
from clika_quant.quantize import summarize
from clika_quant.search import quantize_search
from clika_quant.sensitivity import FAST, Probe, mean_kl
from clika_runtime.kernels.blocks import BlockQuantized

REQUANT_BLOCK = 32


@dataclass(frozen=True)
class Candidate:
    """One 8-bit group of a layer matrix and the MatMulNBits node that reads it."""

    matrix: str  # the record's matrix name
    group: int  # index of the group in the record
    part: str  # its initializers' base name
    node: str
    bytes: int  # as stored now

    @property
    def key(self) -> str:
        return self.part


def candidates_of(model: onnx.ModelProto, record: dict[str, Any]) -> list[Candidate]:
    nodes = {n.input[1]: n for n in model.graph.node if n.op_type == "MatMulNBits"}
    found = []
    for name, entry in record.get("matrices", {}).items():
        if entry.get("layer") is None or not entry.get("groups"):
            continue
        base = name[: -len(".weight")] if name.endswith(".weight") else name
        groups = entry["groups"]
        for i, group in enumerate(groups):
            if group["bits"] != 8 or group.get("offsets") or group.get("stored"):
                continue
            part = base if len(groups) == 1 else f"{base}.part{i}"
            node = nodes.get(f"{part}.qweight")
            if node is not None and _attr(node, "bits") == 8:
                found.append(Candidate(name, i, part, node.name, int(group["bytes"])))
    return sorted(found, key=lambda c: c.key)


def stored_matrix(node: onnx.NodeProto, load: Callable[[str], np.ndarray]) -> BlockQuantized:
    """The 8-bit matrix a MatMulNBits node reads, back from its initializers."""
    n, k, block = _attr(node, "N"), _attr(node, "K"), _attr(node, "block_size")
    codes = np.asarray(load(node.input[1]), np.uint8).reshape(n, -1)
    scales = np.asarray(load(node.input[2]), np.float32).reshape(n, -1)
    zp = None
    if len(node.input) > 3 and node.input[3]:
        zp = np.asarray(load(node.input[3]), np.uint8).reshape(n, -1)
    return BlockQuantized(codes, scales, zp, 8, block, k)


def four_bit_form(matrix: BlockQuantized) -> BlockQuantized:
    """The 4-bit requantization: blocks of 32, integer zero points (no offsets: no extra Gemm)."""
    return quantize_search(matrix.dequantize(), 4, REQUANT_BLOCK, "uint8")


@dataclass
class Variants:
    """Builds copies of the folder's graph with some candidates at 4 bits."""

    model: onnx.ModelProto
    load: ExternalWeights
    forms: dict[str, BlockQuantized]

    def build(
        self, chosen: Sequence[Candidate], keep_arrays: bool = False
    ) -> tuple[onnx.ModelProto, Rewriter]:
        copy = onnx.ModelProto()
        copy.CopyFrom(self.model)
        rewriter = Rewriter(copy.graph, keep_arrays=keep_arrays)
        for cand in chosen:
            node = rewriter.node(cand.node)
            rewriter.removed_initializers.update(i for i in node.input[1:] if i)
            scope = node.name.rsplit("/", 1)[0]
            rewriter.replaced[node.name] = rewriter._nbits(
                node.input[0], node.output[0], self.forms[cand.key], cand.part, scope, FAST
            )
        rewriter.apply()
        return copy, rewriter


def choose_bits(
    folder: str | Path,
    record: dict[str, Any],
    tokens: Sequence[int],
    *,
    target_kl: float,
    threads: int | None = None,
    on_probe: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Measure, choose and apply: the folder's graph and data file get the chosen 4-bit forms.

    ``on_probe(total=N)`` is told after each graph variant ran (N: the reference, each candidate
    and the mix; more when the mix is cut back)."""
    from clika_quant.quality import SequenceRunner
    from clika_runtime.contract.model_folder import open_model_folder

    folder = Path(folder)
    opened = open_model_folder(folder, threads=threads, allow_spinning=False)
    graph_path = folder / opened.graph.file
    model, load = load_graph(graph_path)
    candidates = candidates_of(model, record)
    if not candidates:
        return record
    nodes = {n.name: n for n in model.graph.node}
    forms = {c.key: four_bit_form(stored_matrix(nodes[c.node], load)) for c in candidates}
    variants = Variants(model, load, forms)
    runner = SequenceRunner(opened, min(len(tokens) + 8, opened.manifest.context_window))
    told = (lambda: on_probe(total=len(candidates) + 2)) if on_probe is not None else None
    probe = Probe(runner, model, folder, list(tokens)[: runner.capacity - 8], threads, told)
    reference = probe.logits_of(model)
    measured = {c.key: mean_kl(reference, probe.logits_of(variants.build([c])[0])) for c in candidates}
    saved = {c.key: c.bytes - forms[c.key].nbytes() for c in candidates}
    order = sorted(candidates, key=lambda c: (measured[c.key] / max(saved[c.key], 1), c.key))
    chosen: list[Candidate] = []
    for cand in order:
        if saved[cand.key] > 0 and sum(measured[c.key] for c in chosen) + measured[cand.key] <= target_kl:
            chosen.append(cand)
    final_kl = 0.0
    while chosen:
        final_kl = mean_kl(reference, probe.logits_of(variants.build(chosen)[0]))
        if final_kl <= target_kl:
            break
        chosen.pop()  # the sum under-stated the mix: give back the one taken last
        final_kl = 0.0
    if chosen:
        final, rewriter = variants.build(chosen, keep_arrays=True)
        save_graph(final, graph_path, _data_name(model), load, rewriter.arrays)
    return _recorded(record, candidates, chosen, measured, saved, forms, target_kl, final_kl, probe)


def _recorded(
    record, candidates, chosen, measured, saved, forms, target_kl, final_kl, probe
) -> dict[str, Any]:
    record = dict(record)
    matrices = {name: dict(entry) for name, entry in record["matrices"].items()}
    taken = {c.key for c in chosen}
    for cand in candidates:
        entry = matrices[cand.matrix]
        groups = [dict(g) for g in entry["groups"]]
        group = groups[cand.group]
        group["bits_choice"] = {"measured_kl_at_4_bits": measured[cand.key], "bytes_saved": saved[cand.key]}
        if cand.key in taken:
            form = forms[cand.key]
            was = group["method"] if isinstance(group["method"], str) else "mixed"
            group.update(
                bits=4,
                block_size=form.block_size,
                zero_points="uint8",
                method=f"4-bit search of the {was} weights (chosen by measured error)",
                bytes=form.nbytes(),
                accuracy_level=FAST,
            )
        groups[cand.group] = group
        entry["groups"] = groups
    record["matrices"] = matrices
    record = summarize(record)
    record["scheme"] = (
        f"{record['scheme']}; measured: {len(chosen)} of {len(candidates)} 8-bit layer matrices "
        f"requantized to 4 bits"
    )
    record["bits_sensitivity"] = {
        "method": "KL added on the calibration conversation by each 8-bit layer matrix at 4 bits alone; "
        "taken the least KL per byte saved first while the KLs add up to the target, then the mix "
        "measured and cut back until it is within the target",
        "calibration_tokens": len(probe.tokens),
        "target_kl": target_kl,
        "measured_kl": {k: measured[k] for k in sorted(measured)},
        "requantized": sorted(taken),
        "bytes_before": sum(c.bytes for c in candidates),
        "bytes_saved": sum(saved[k] for k in taken),
        "measured_kl_left": final_kl,
    }
    return record


def _data_name(model: onnx.ModelProto) -> str:
    names = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    return names.pop() if len(names) == 1 else "model.onnx.data"


def _attr(node: onnx.NodeProto, name: str) -> Any:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)
