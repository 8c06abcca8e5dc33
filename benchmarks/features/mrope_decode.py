"""Decode speed of a qwen2 step graph rotating inside GroupQueryAttention and by M-RoPE, alternating.

An M-RoPE graph (Qwen2-VL) rotates q and k with its own ops before the
attention grid (``clika_export.graph.mrope``) and runs GroupQueryAttention with
``do_rotary=0``. No Qwen2-VL checkpoint is reachable here, so this benchmark
copies a qwen2 text model's folder (files hard-linked, not copied), rewrites
its continuous graph the way the exporter builds an M-RoPE one (sections in
Qwen2-VL-2B's proportions, 1/4 : 3/8 : 3/8 of the frequencies; same quantized
weights) and runs the same single-stream chat decode (greedy, EOS ignored) on
both in alternating rounds. A text prompt rotates by its KV index under both,
so the replies must be the same; only the ratio of the speeds means anything
on a shared machine.

    python benchmarks/features/mrope_decode.py qwen2.5-coder-0.5b-instruct --rounds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
from pathlib import Path

import onnx
from onnx import helper

from clika_export.graph import mrope
from clika_export.graph.builder import GraphBuilder
from clika_export.graph.decoder_spec import DecoderSpec
from clika_runtime import modelverse
from clika_runtime.contract import step_graph as io
from clika_runtime.contract.manifest import MANIFEST_FILE, Manifest
from clika_runtime.store import resolve

PROMPT = (
    "You are a careful assistant. Summarise in plain words, step by step, how a river carries sand "
    "from the mountains to the sea, what happens to it at each bend, why deltas form where rivers meet "
    "still water, and what people living near a delta should know about floods and shifting channels."
)


def sections(head_dim: int) -> tuple[int, int, int]:
    """Qwen2-VL-2B's split (16, 24, 24 of 64 frequencies) for ``head_dim / 2`` frequencies."""
    freqs = head_dim // 2
    temporal = freqs // 4
    height = (freqs - temporal) // 2
    return temporal, height, freqs - temporal - height


def with_mrope(folder: Path, target: Path) -> Path:
    """A copy of ``folder`` whose continuous graph rotates by M-RoPE (other files hard-linked)."""
    manifest = Manifest.read(folder)
    spec = manifest.graphs["continuous"]
    target.mkdir()
    for path in folder.iterdir():
        if path.name not in (spec.file, MANIFEST_FILE):
            os.link(path, target / path.name)
    model = onnx.load(str(folder / spec.file), load_external_data=False)
    _rotate_before_the_grid(model.graph, manifest)
    onnx.save(model, str(target / spec.file))
    graphs = {
        **manifest.graphs,
        "continuous": dataclasses.replace(spec, inputs=(*spec.inputs, *io.MROPE_INPUTS)),
    }
    dataclasses.replace(manifest, graphs=graphs).write(target)
    return target


def _rotate_before_the_grid(graph: onnx.GraphProto, manifest: Manifest) -> None:
    arch = manifest.architecture
    decoder = DecoderSpec(arch, manifest.context_window, qkv_bias=True, mrope_section=sections(arch.head_dim))
    g = GraphBuilder("mrope", None)  # type: ignore[arg-type]  # small constants only
    mrope.declare_inputs(g)
    cos, sin = mrope.cos_sin(g, decoder)
    nodes, producers = list(graph.node), {out: node for node in graph.node for out in node.output}
    shared, layers = list(g.nodes), []
    for layer, gqa in enumerate(node for node in nodes if node.op_type == "GroupQueryAttention"):
        grid = producers[gqa.input[0]]
        start = len(g.nodes)
        with g.scope(f"layers.{layer}"):
            grid.input[0] = mrope.rotate_qk(g, decoder, layer, grid.input[0], cos, sin)
        layers.append((grid, g.nodes[start:]))
        gqa.input[7], gqa.input[8] = "", ""
        for attribute in gqa.attribute:
            if attribute.name == "do_rotary":
                attribute.CopyFrom(helper.make_attribute("do_rotary", 0))
    ordered = [*shared]
    for node in nodes:
        ordered += next((added for grid, added in layers if grid is node), [])
        ordered.append(node)
    del graph.node[:]
    graph.node.extend(ordered)
    read = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in read]  # the rotary tables no node reads now
    del graph.initializer[:]
    graph.initializer.extend([*kept, *g.initializers])
    graph.input.extend(g.inputs)


def decode_rate(model: modelverse.GenerativeModel, new_tokens: int) -> tuple[float, str]:
    reply = model.generate(PROMPT, max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    return model.report.decode_tokens_per_s or 0.0, reply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    folder = resolve(args.model, None, pull=True, say=print, progress=True).folder
    if Manifest.read(folder).architecture.family != "qwen2":
        raise SystemExit(f"{args.model} is not a qwen2 model (the text family Qwen2-VL's is)")
    # Beside the folder: hard links need the same file system.
    with tempfile.TemporaryDirectory(prefix=".mrope-", dir=folder.parent) as scratch:
        rotated = with_mrope(folder, Path(scratch) / "mrope")
        models = {
            "rotary in GroupQueryAttention": modelverse.load(folder, threads=args.threads),
            "M-RoPE ops before the grid": modelverse.load(rotated, threads=args.threads),
        }
        assert models["M-RoPE ops before the grid"].engine.core.executor.takes_mrope
        rates: dict[str, list[float]] = {name: [] for name in models}
        replies = {name: decode_rate(model, 8)[1] for name, model in models.items()}  # warm up
        for _ in range(args.rounds):
            for name, model in models.items():
                rate, replies[name] = decode_rate(model, args.new_tokens)
                rates[name].append(rate)
        print(f"| graph | decode tok/s (median of {args.rounds}) | rounds |")
        print("|---|---:|---|")
        for name, values in rates.items():
            print(f"| {name} | {statistics.median(values):.1f} | {' '.join(f'{v:.1f}' for v in values)} |")
        names = list(models)
        ratio = statistics.median(rates[names[1]]) / statistics.median(rates[names[0]])
        print(
            f"M-RoPE / GroupQueryAttention's rotary: {ratio:.3f}; same reply: {len(set(replies.values())) == 1}"
        )
        for model in models.values():
            model.close()


if __name__ == "__main__":
    main()
