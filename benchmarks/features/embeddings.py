"""Embeddings per second at batch 1 and 8, and what the hidden_states output costs a decode step.

Embeddings: ``GenerativeModel.embed`` over sentences of about ``--tokens``
tokens, ``--batches`` inputs a call; the figure is the median of ``--rounds``
rounds (inputs per second), beside the engine's prefill of the same token ids
(submitted together, one token each), in alternating rounds. Decode cost: the folder's continuous graph with
and without the ``hidden_states`` output (``clika_export.graph.hidden_states``
writes one beside the other), one decode step at batch 1 and 8 over a short
past, alternating rounds; the figure is the ratio (this VM's speed drifts, so
only ratios within one run mean anything).

    python benchmarks/embeddings.py smollm2-135m-instruct --batches 1 8 --tokens 32
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from clika_export.graph.hidden_states import HIDDEN_NORM
from clika_runtime import modelverse
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_session, session_options
from clika_runtime.contract.step_graph import HIDDEN_STATES, StepRow, pack_step
from clika_runtime.store import resolve

WORDS = (
    "the quick brown fox jumps over the lazy dog while a river runs past old mills and green hills".split()
)


def sentences(model: modelverse.GenerativeModel, count: int, tokens: int) -> list[str]:
    """``count`` different texts of about ``tokens`` tokens."""
    texts = []
    for salt in range(count):
        words = [WORDS[(i * 7 + salt * 13) % len(WORDS)] for i in range(tokens * 2)]
        ids = model.tokenizer.encode(" ".join(words))[: tokens - 1]
        texts.append(f"{salt} " + model.tokenizer.decode(ids))
    return texts


def embeddings_per_second(
    model: modelverse.GenerativeModel, batch: int, tokens: int, rounds: int
) -> tuple[float, float]:
    """Inputs per second embedded, and prefilled by the engine (the same token ids, one token each), medians."""
    texts = sentences(model, batch * 4, tokens)
    ids = [model.embedder.tokens(text) for text in texts]
    config = model.defaults.overlay({"max_new_tokens": 1, "temperature": 0.0})

    def embed(group: list[list[int]]) -> None:
        model.embed(group)

    def prefill(group: list[list[int]]) -> None:
        for stream in [model.engine.submit(row, config) for row in group]:  # decoded together
            stream.result()

    embed(ids[:batch])  # warm-up
    prefill(ids[:batch])
    rates: dict[str, list[float]] = {"embed": [], "prefill": []}
    for _ in range(rounds):  # alternating: the machine's speed drifts
        for name, run in (("embed", embed), ("prefill", prefill)):
            began = time.perf_counter()
            for start in range(0, len(ids), batch):
                run(ids[start : start + batch])
            rates[name].append(len(ids) / (time.perf_counter() - began))
    return statistics.median(rates["embed"]), statistics.median(rates["prefill"])


def graph_without_output(folder: Path) -> Path:
    """The continuous graph without hidden_states, written beside the weights it reads (removed after)."""
    spec = Manifest.read(folder).graphs["continuous"]
    model = onnx.load(str(folder / spec.file), load_external_data=False)
    kept = [node for node in model.graph.node if node.name != HIDDEN_NORM]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    outputs = [value for value in model.graph.output if value.name != HIDDEN_STATES]
    del model.graph.output[:]
    model.graph.output.extend(outputs)
    path = folder / f".bench_without_{HIDDEN_STATES}.{os.getpid()}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def decode_step_seconds(session: ort.InferenceSession, manifest: Manifest, batch: int, past: int) -> float:
    a = manifest.architecture
    shape = (batch, a.num_kv_heads, past + 8, a.head_dim)
    caches = [np.zeros(shape, np.float32) for _ in range(2 * a.num_layers)]
    feeds = pack_step([StepRow(past, [1]) for _ in range(batch)], capacity=past + 8).feeds()
    kv = manifest.graphs["continuous"].kv
    binding = session.io_binding()
    for name, array in feeds.items():
        binding.bind_cpu_input(name, np.ascontiguousarray(array))
    for layer in range(a.num_layers):
        for i, (past_name, present_name) in enumerate(
            ((kv.past_key, kv.present_key), (kv.past_value, kv.present_value))
        ):
            value = ort.OrtValue.ortvalue_from_numpy(caches[2 * layer + i])
            binding.bind_ortvalue_input(past_name.format(layer=layer), value)
            binding.bind_ortvalue_output(present_name.format(layer=layer), value)
    binding.bind_output("logits")
    session.run_with_iobinding(binding)  # warm-up
    began = time.perf_counter()
    steps = 20
    for _ in range(steps):
        session.run_with_iobinding(binding)
    return (time.perf_counter() - began) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    folder = resolve(args.model, None, pull=True, say=print, progress=True).folder
    model = modelverse.load(folder, threads=args.threads)
    print(f"{args.model}: pooling {model.embedder.pooling}, {model.embedder.dimensions} dimensions")
    for batch in args.batches:
        rate, prefill = embeddings_per_second(model, batch, args.tokens, args.rounds)
        print(
            f"embeddings  batch {batch}: {rate:7.1f} inputs/s of ~{args.tokens} tokens "
            f"({rate / prefill:.2f}x the engine's prefill of the same ids, {prefill:.1f}/s)"
        )
    model.close()
    manifest = Manifest.read(folder)
    plain_path = graph_without_output(folder)
    try:
        graph = folder / manifest.graphs["continuous"].file
        with_output = open_session(graph, session_options(args.threads), manifest.rope_tables)
        plain = open_session(plain_path, session_options(args.threads), manifest.rope_tables)
    finally:
        plain_path.unlink()
    for batch in args.batches:
        ratios = []
        for _ in range(args.rounds):
            base = decode_step_seconds(plain, manifest, batch, 128)
            ratios.append(decode_step_seconds(with_output, manifest, batch, 128) / base)
        print(f"decode step batch {batch}: with / without hidden_states {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
