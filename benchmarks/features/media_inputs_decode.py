"""Decode speed of a text-only step graph with and without the media inputs, in one alternating run.

A folder exported with a vision tower takes ``media_embeds`` / ``media_rows``
(a ScatterND over the token embeddings; M = 0 on a text-only step). This
benchmark copies a text model's folder (files hard-linked, not copied), adds
those inputs to each of its graphs the way the exporter builds them, and runs
the same single-stream chat decode (a 133-token prompt, 128 new tokens, EOS
ignored, greedy) on both in alternating rounds. Only the ratio means anything
on a shared machine.

    python benchmarks/media_inputs_decode.py smollm2-135m-instruct --rounds 5 [--mode paged]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from clika_runtime import modelverse
from clika_runtime.contract import step_graph as io
from clika_runtime.contract.manifest import MANIFEST_FILE, Manifest
from clika_runtime.store import resolve

EMBEDDINGS = "/model/embed_tokens/Gather/output_0"
PROMPT = (
    "You are a careful assistant. Summarise in plain words, step by step, how a river carries sand "
    "from the mountains to the sea, what happens to it at each bend, why deltas form where rivers meet "
    "still water, and what people living near a delta should know about floods and shifting channels."
)


def with_media_inputs(folder: Path, target: Path) -> Path:
    """A copy of ``folder`` whose graphs also take the media inputs (other files hard-linked:
    the manifest refuses symbolic links out of the folder)."""
    manifest = Manifest.read(folder)
    graph_files = {spec.file for spec in manifest.graphs.values()}
    target.mkdir()
    for path in folder.iterdir():
        if path.name not in graph_files and path.name != MANIFEST_FILE:
            os.link(path, target / path.name)
    for spec in manifest.graphs.values():
        model = onnx.load(str(folder / spec.file), load_external_data=False)
        _add_media(model.graph, manifest.architecture.hidden_size)
        onnx.save(model, str(target / spec.file))
    graphs = {
        key: dataclasses.replace(spec, inputs=(*spec.inputs, *io.MEDIA_INPUTS))
        for key, spec in manifest.graphs.items()
    }
    dataclasses.replace(manifest, graphs=graphs).write(target)
    return target


def _add_media(graph: onnx.GraphProto, hidden: int) -> None:
    # The token embeddings [T, hidden] as the exporter names them (a quantized table's
    # GatherBlockQuantized + Reshape keep the name); families with an embedding scale differ.
    tokens = EMBEDDINGS
    embed = next(node for node in graph.node if tokens in node.output)
    scattered = tokens + "/media"
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == tokens:
                node.input[i] = scattered
    at = list(graph.node).index(embed) + 1
    graph.node.insert(
        at,
        helper.make_node(
            "Unsqueeze", [io.MEDIA_ROWS, "media/axes"], ["media/rows"], name="/model/media/Rows"
        ),
    )
    graph.node.insert(
        at + 1,
        helper.make_node(
            "ScatterND", [tokens, "media/rows", io.MEDIA_EMBEDS], [scattered], name="/model/media/ScatterND"
        ),
    )
    graph.initializer.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), "media/axes"))
    graph.input.append(helper.make_tensor_value_info(io.MEDIA_EMBEDS, TensorProto.FLOAT, ["media", hidden]))
    graph.input.append(helper.make_tensor_value_info(io.MEDIA_ROWS, TensorProto.INT64, ["media"]))


def step_times(folders: dict[str, Path], mode: str, kv_dtype: str, calls: int, threads: int | None) -> None:
    """Per-call time of one decode step (one row, 256 cached positions) on each graph, the calls
    interleaved in blocks of 10 so that both see the same load."""
    from clika_runtime.contract.model_folder import open_model_folder
    from clika_runtime.contract.paged_step_graph import PagedRow, pack_paged_step
    from clika_runtime.contract.step_graph import pack_step, text_only_media

    runs = {}
    for name, folder in folders.items():
        opened = open_model_folder(folder, kv_mode=mode, kv_dtype=kv_dtype, threads=threads)
        arch, kv = opened.manifest.architecture, opened.graph.kv
        dtype = np.int8 if kv.dtype == "int8" else np.float32
        if mode == "paged":
            shape = (arch.num_kv_heads, 8, kv.block_size, arch.head_dim)
            feeds = pack_paged_step([PagedRow(256, [42], list(range(8)))], block_size=kv.block_size).feeds()
        else:
            shape = (1, arch.num_kv_heads, 512, arch.head_dim)
            feeds = pack_step([(256, [42], False)]).feeds()
        binding = opened.session.io_binding()
        for key, array in {**feeds, **text_only_media(opened.session.get_inputs())}.items():
            binding.bind_cpu_input(key, np.ascontiguousarray(array))
        values = []  # one buffer bound as past and present (updated in place), as the engine binds it
        for layer in range(arch.num_layers):
            for past, present in ((kv.past_key, kv.present_key), (kv.past_value, kv.present_value)):
                value = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype))
                binding.bind_ortvalue_input(past.format(layer=layer), value)
                binding.bind_ortvalue_output(present.format(layer=layer), value)
                values.append(value)
        binding.bind_output(opened.graph.logits_output)
        runs[name] = (opened.session, binding, values)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(calls // 10):
        for name, (session, binding, _) in runs.items():
            for _ in range(10):
                began = time.perf_counter()
                session.run_with_iobinding(binding)
                times[name].append(time.perf_counter() - began)
    medians = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    for name, ms in medians.items():
        print(f"| {name} | decode step {ms:.3f} ms (median of {len(times[name])}) |")
    names = list(medians)
    print(
        f"step time media inputs / text-only: {medians[names[1]] / medians[names[0]]:.3f} ({mode}, {kv_dtype} KV)"
    )


def media_share(folder: Path, mode: str, kv_dtype: str, calls: int, threads: int | None) -> None:
    """ORT's profile of ``calls`` text-only decode steps on the media graph: the media nodes'
    share of the time spent in every node (a ratio that the machine's load hardly moves)."""
    import json

    from clika_runtime.contract.model_folder import open_session, session_options

    manifest = Manifest.read(folder)
    graph = manifest.graphs[f"{mode}:int8" if kv_dtype == "int8" else mode]
    options = session_options(threads)
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / "profile")
    session = open_session(folder / graph.file, options, manifest.rope_tables)
    arch, kv = manifest.architecture, graph.kv
    dtype = np.int8 if kv.dtype == "int8" else np.float32
    if mode == "paged":
        from clika_runtime.contract.paged_step_graph import PagedRow, pack_paged_step

        shape = (arch.num_kv_heads, 8, kv.block_size, arch.head_dim)
        feeds = pack_paged_step([PagedRow(256, [42], list(range(8)))], block_size=kv.block_size).feeds()
    else:
        from clika_runtime.contract.step_graph import pack_step

        shape = (1, arch.num_kv_heads, 512, arch.head_dim)
        feeds = pack_step([(256, [42], False)]).feeds()
    from clika_runtime.contract.step_graph import text_only_media

    feeds = {**feeds, **text_only_media(session.get_inputs())}
    for layer in range(arch.num_layers):
        for past in (kv.past_key, kv.past_value):
            feeds[past.format(layer=layer)] = np.zeros(shape, dtype)
    for _ in range(calls):
        session.run([graph.logits_output], feeds)
    profile = Path(session.end_profiling())
    events = json.loads(profile.read_text())
    profile.unlink()
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    total = sum(e["dur"] for e in nodes)
    media = sum(e["dur"] for e in nodes if "/media/" in e["name"])
    print(
        f"media nodes: {media / calls:.1f} us per step of {total / calls:.0f} us in all nodes "
        f"({100 * media / total:.2f}%, {calls} text-only decode steps, {mode}, {kv_dtype} KV)"
    )


def decode_rate(model: modelverse.GenerativeModel, new_tokens: int) -> float:
    model.generate(PROMPT, max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    return model.report.decode_tokens_per_s or 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--mode", choices=["continuous", "paged"], default="continuous")
    parser.add_argument("--kv-dtype", choices=["float32", "int8"], default="float32")
    parser.add_argument(
        "--step-calls", type=int, default=0, help="also time this many bare decode steps each"
    )
    parser.add_argument(
        "--profile-calls", type=int, default=0, help="also profile this many steps (media share)"
    )
    args = parser.parse_args()
    folder = resolve(args.model, None, pull=True, say=print, progress=True).folder
    # Beside the folder: hard links need the same file system.
    with tempfile.TemporaryDirectory(prefix=".media-inputs-", dir=folder.parent) as scratch:
        media = with_media_inputs(folder, Path(scratch) / "media")
        if args.profile_calls:
            media_share(media, args.mode, args.kv_dtype, args.profile_calls, args.threads)
        if args.step_calls:
            folders = {"text-only graph": folder, "media inputs": media}
            step_times(folders, args.mode, args.kv_dtype, args.step_calls, args.threads)
        load = dict(threads=args.threads, kv_cache_mode=args.mode, kv_cache_dtype=args.kv_dtype)
        models = {
            "text-only graph": modelverse.load(folder, **load),
            "media inputs": modelverse.load(media, **load),
        }
        assert models["media inputs"].engine.core.executor.takes_media
        rates: dict[str, list[float]] = {name: [] for name in models}
        for model in models.values():
            decode_rate(model, 8)  # warm up
        for _ in range(args.rounds):
            for name, model in models.items():
                rates[name].append(decode_rate(model, args.new_tokens))
        print(f"| graph | decode tok/s (median of {args.rounds}) | rounds |")
        print("|---|---:|---|")
        for name, values in rates.items():
            print(f"| {name} | {statistics.median(values):.1f} | {' '.join(f'{v:.1f}' for v in values)} |")
        ratio = statistics.median(rates["media inputs"]) / statistics.median(rates["text-only graph"])
        print(f"media inputs / text-only: {ratio:.3f} ({args.mode}, {args.kv_dtype} KV)")
        for model in models.values():
            model.close()


if __name__ == "__main__":
    main()
