"""The step graphs' ``hidden_states`` output: the final norm of every packed token, for embeddings.

The head normalizes only the positions ``logits_index`` picks; embeddings need
every token's final hidden state (mean pooling) without paying the lm_head for
each. This adds a second final norm beside the head's, over all ``T`` packed
tokens, as the graph output ``hidden_states [T, H]``::

    mlp_out[T,H], residual[T,H] --SkipSimplifiedLayerNorm(model.norm.weight)--> hidden_states[T,H]

The engine does not bind it (a decode step's extra norm costs a few microseconds);
an embedding call runs the same session with ``logits_index`` at one token a row.
Every step graph of a folder (continuous, paged, their int8 twins) shares the head,
so the same edit applies to each. A second session over a separate graph was the
alternative: it holds its own copy of the prepacked weights (+100 MB RSS for
SmolLM2-135M int4, +590 MB for Qwen2.5-Coder-0.5B int4, measured), where this
output costs nothing while unused.

Folders exported before it get it from ``ensure_hidden_states``: each graph is
rewritten under a new file name and the manifest switched in one rename, so a
reader holding the old manifest still opens the old, complete files.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from clika_export.graph.builder import save_model
from clika_runtime.contract.manifest import MANIFEST_FILE, OPTIMUM_BUILDER, GraphSpec, Manifest
from clika_runtime.contract.step_graph import HIDDEN_STATES

HEAD_NORM = "/model/norm/SkipSimplifiedLayerNormalization"
HEAD_GATHERS = ("/model/norm/GatherMlp", "/model/norm/GatherResidual")
HIDDEN_NORM = "/model/hidden_states/SkipSimplifiedLayerNormalization"
# Added to a graph file's stem when an older folder's graph is rewritten with the output.
UPGRADED_SUFFIX = "_h"


class HiddenStatesError(ValueError):
    """A graph whose head is not the one the step graph builder writes."""


def add_hidden_states(model: onnx.ModelProto, hidden_size: int) -> bool:
    """Give ``model`` its ``hidden_states`` output; False when it has one already."""
    graph = model.graph
    if any(value.name == HIDDEN_STATES for value in graph.output):
        return False
    nodes = {node.name: node for node in graph.node}
    head = nodes.get(HEAD_NORM)
    gathers = [nodes.get(name) for name in HEAD_GATHERS]
    if head is None or any(g is None for g in gathers):
        raise HiddenStatesError(f"{graph.name}: no final norm {HEAD_NORM} fed by {', '.join(HEAD_GATHERS)}")
    mlp_out, residual = (g.input[0] for g in gathers)  # type: ignore[union-attr]
    epsilon = next((a.f for a in head.attribute if a.name == "epsilon"), 1e-6)
    graph.node.append(
        helper.make_node(
            "SkipSimplifiedLayerNormalization",
            [mlp_out, residual, head.input[2]],
            [HIDDEN_STATES],
            name=HIDDEN_NORM,
            domain=head.domain,
            epsilon=epsilon,
        )
    )
    graph.output.append(
        helper.make_tensor_value_info(HIDDEN_STATES, TensorProto.FLOAT, ["tokens", hidden_size])
    )
    return True


def add_hidden_states_file(source: Path, target: Path, hidden_size: int) -> bool:
    """Write ``target``: the graph file ``source`` with the output (weights file shared); False if it had it."""
    model = onnx.load(str(source), load_external_data=False)
    if not add_hidden_states(model, hidden_size) and source == target:
        return False
    partial = target.parent / f".{target.name}.{os.getpid()}.partial"
    save_model(model, partial)
    os.replace(partial, target)  # a reader never opens half a graph
    return True


def with_hidden_states(spec: GraphSpec, file: str | None = None) -> GraphSpec:
    outputs = spec.outputs if HIDDEN_STATES in spec.outputs else (*spec.outputs, HIDDEN_STATES)
    return dataclasses.replace(spec, file=file or spec.file, outputs=outputs)


def add_hidden_states_in_place(folder: Path) -> Manifest:
    """Give the continuous graph of a folder being written the output (before its twins derive from it)."""
    manifest = Manifest.read(folder)
    spec = manifest.graphs["continuous"]
    add_hidden_states_file(folder / spec.file, folder / spec.file, manifest.architecture.hidden_size)
    return _write_manifest(folder, manifest, {"continuous": with_hidden_states(spec)})


def ensure_hidden_states(folder: Path) -> Manifest:
    """The folder's manifest, after giving every step graph without it the output (about a second)."""
    folder = Path(folder)
    manifest = Manifest.read(folder)
    missing = {
        key: spec
        for key, spec in manifest.graphs.items()
        # optimum's past-KV graphs have no packed hidden rows to expose: such folders do not embed
        if HIDDEN_STATES not in spec.outputs and spec.builder != OPTIMUM_BUILDER
    }
    if not missing:
        return manifest
    hidden_size = manifest.architecture.hidden_size
    upgraded = {}
    for key, spec in missing.items():
        file = f"{Path(spec.file).stem}{UPGRADED_SUFFIX}.onnx"
        add_hidden_states_file(folder / spec.file, folder / file, hidden_size)
        upgraded[key] = with_hidden_states(spec, file)
    return _write_manifest(folder, manifest, upgraded)


def _write_manifest(folder: Path, manifest: Manifest, graphs: dict[str, GraphSpec]) -> Manifest:
    manifest = dataclasses.replace(manifest, graphs={**manifest.graphs, **graphs})
    partial = folder / f".{MANIFEST_FILE}.{os.getpid()}.partial"
    partial.write_text(manifest.to_json() + "\n", encoding="utf-8")
    os.replace(partial, folder / MANIFEST_FILE)
    return manifest
