"""Where a single-stream decode step's time goes: model folders' step graphs (and an
onnxruntime-genai model) run side by side in alternating rounds, with ORT's per-operator profile.

    python benchmarks/peers/decode_profile.py --folder new=path/to/folder --folder old=path/to/other \\
        --genai ~/.cache/clika-peers/models/genai-int4 --past 160 --profile

Each graph runs one token a step after ``--past`` cached tokens (one row, the KV buffers bound
as past and present, as the engine and genai's shared buffer do), through ORT alone: no
tokenizer, no engine. ``--profile`` adds, per graph, the kernel time by operator type and by
node (layer numbers folded into ``N``), from ``enable_profiling`` over its own steps. On a
machine shared with other work only the ratios of one run mean much; the per-step minimum is
the figure least moved by other processes. ``--tokens N --past 0`` runs a prompt chunk of N
tokens instead (prefill: the same graphs, one row of N new tokens, logits of the last only).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnxruntime as ort

from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_session

CAPACITY = 512  # the KV buffer's positions at least (steps write positions ``past`` onwards only)


SPIN = {"spin": True}  # --no-spin: workers sleep, so the process CPU time is the work done


def session(
    path: Path, threads: int, profile_prefix: str | None = None, rope_tables: tuple = ()
) -> ort.InferenceSession:
    """A session on ``path``; ``rope_tables``: the computed tables of a clika folder's manifest."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if SPIN["spin"] else "0")
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return open_session(path, options, rope_tables)


class Graph:
    """One decode step of a graph with every input and output bound once."""

    def __init__(
        self,
        sess: ort.InferenceSession,
        feeds: dict[str, np.ndarray],
        kv: list[tuple[str, str]],
        heads: int,
        head_dim: int,
        capacity: int,
        rows: int = 1,
    ):
        self.session = sess
        self.binding = sess.io_binding()
        self._kept = []
        for past, present in kv:
            value = ort.OrtValue.ortvalue_from_numpy(np.zeros((rows, heads, capacity, head_dim), np.float32))
            self.binding.bind_ortvalue_input(past, value)
            self.binding.bind_ortvalue_output(present, value)
            self._kept.append(value)
        for name, array in feeds.items():
            value = ort.OrtValue.ortvalue_from_numpy(array)
            self.binding.bind_ortvalue_input(name, value)
            self._kept.append(value)
        bound = {present for _, present in kv}
        for output in sess.get_outputs():
            if output.name not in bound:
                self.binding.bind_output(output.name)

    def step(self) -> tuple[float, float]:
        """Wall and process CPU seconds of one step."""
        start, cpu = time.perf_counter(), time.process_time()
        self.session.run_with_iobinding(self.binding)
        return time.perf_counter() - start, time.process_time() - cpu


def folder_graph(
    folder: Path, past: int, threads: int, profile: str | None, tokens: int = 1, rows: int = 1
) -> Graph:
    """The folder's continuous graph: ``rows`` rows of ``tokens`` new tokens, each after ``past``."""
    manifest = json.loads((folder / "manifest.json").read_text())
    spec = manifest["graphs"]["continuous"]
    sess = session(folder / spec["file"], threads, profile, Manifest.read(folder).rope_tables)
    kv = spec["kv"]
    layers = manifest["architecture"]["num_layers"]
    pairs = [
        (kv[f"past_{kind}"].format(layer=n), kv[f"present_{kind}"].format(layer=n))
        for n in range(layers)
        for kind in ("key", "value")
    ]
    row_of, column_of = np.divmod(np.arange(rows * tokens, dtype=np.int64), tokens)
    feeds = {
        "input_ids": np.full(rows * tokens, 42, np.int64),
        "grid_index": np.arange(rows * tokens, dtype=np.int64).reshape(rows, tokens),
        "token_cell": np.stack([row_of, column_of], axis=1),
        "query_seqlens": np.full(rows, tokens, np.int32),
        "seqlens_k": np.full(rows, past + tokens - 1, np.int32),
        "total_sequence_length": np.array(past + tokens, np.int32),
        "logits_index": np.arange(1, rows + 1, dtype=np.int64) * tokens - 1,
    }
    names = {i.name for i in sess.get_inputs()}
    arch = manifest["architecture"]
    feeds = {k: v for k, v in feeds.items() if k in names}
    return Graph(sess, feeds, pairs, arch["num_kv_heads"], arch["head_dim"], capacity(past, tokens), rows)


def genai_graph(model_dir: Path, past: int, threads: int, profile: str | None, tokens: int = 1) -> Graph:
    decoder = json.loads((model_dir / "genai_config.json").read_text())["model"]["decoder"]
    sess = session(model_dir / decoder["filename"], threads, profile)
    inputs, outputs = decoder["inputs"], decoder["outputs"]
    pairs = [
        (inputs[f"past_{kind}_names"] % n, outputs[f"present_{kind}_names"] % n)
        for n in range(decoder["num_hidden_layers"])
        for kind in ("key", "value")
    ]
    feeds = {
        inputs["input_ids"]: np.full((1, tokens), 42, np.int64),
        inputs["attention_mask"]: np.ones((1, past + tokens), np.int64),
    }
    heads, head_dim = decoder["num_key_value_heads"], decoder["head_size"]
    return Graph(sess, feeds, pairs, heads, head_dim, capacity(past, tokens))


def capacity(past: int, tokens: int) -> int:
    """KV positions to bind: room for the step's tokens after ``past``."""
    return max(CAPACITY, past + tokens + 1)


def op_profile(graph: Graph, steps: int) -> tuple[dict[str, float], dict[str, float]]:
    """Kernel microseconds per step by operator type and by node (layer numbers folded)."""
    for _ in range(steps):
        graph.step()
    path = graph.session.end_profiling()
    events = json.loads(Path(path).read_text())
    os.unlink(path)
    runs = sum(1 for e in events if e.get("cat") == "Session" and e["name"] == "model_run") or 1
    by_op, by_node = defaultdict(float), defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"] / runs
            by_node[re.sub(r"\d+", "N", e["name"][: -len("_kernel_time")])] += e["dur"] / runs
    return dict(by_op), dict(by_node)


def print_profile(name: str, by_op: dict[str, float], by_node: dict[str, float], top: int) -> None:
    total = sum(by_op.values()) or 1.0
    print(f"\n{name}: kernel time {total / 1e3:.3f} ms a step (profiled)")
    for table in (by_op, by_node):
        for key, us in sorted(table.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {key[:64]:64s} {us / 1e3:7.3f} ms {100 * us / total:5.1f}%")
        print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folder", action="append", default=[], help="NAME=model folder (repeatable)")
    ap.add_argument("--genai", type=Path, help="an onnxruntime-genai model folder (genai_config.json)")
    ap.add_argument("--past", type=int, default=160, help="cached tokens before the step")
    ap.add_argument("--tokens", type=int, default=1, help="new tokens a step (a prompt chunk: >1)")
    ap.add_argument("--rows", type=int, default=1, help="rows a step (a server batch), model folders only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40, help="steps per graph per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="also print ORT's per-operator profile")
    ap.add_argument(
        "--no-spin",
        action="store_true",
        help="sleeping workers: the CPU time a step takes is its work, whatever else runs",
    )
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    if args.tokens < 1 or args.past < (1 if args.tokens == 1 else 0):
        ap.error("--tokens must be >= 1 and --past >= 1 for a decode step (0 allowed for a prompt)")
    if args.rows < 1 or (args.rows > 1 and args.genai):
        ap.error("--rows must be >= 1, and 1 with --genai (its graph is measured one row at a time)")
    SPIN["spin"] = not args.no_spin
    makers = {}
    for spec in args.folder:
        name, _, path = spec.partition("=")
        if not path:
            ap.error(f"--folder takes NAME=PATH, got {spec!r}")
        makers[name] = (functools.partial(folder_graph, rows=args.rows), Path(path))
    if args.genai:
        makers["onnxruntime-genai"] = (genai_graph, args.genai)
    if not makers:
        ap.error("name at least one --folder or --genai")
    graphs = {
        name: make(path, args.past, args.threads, None, args.tokens) for name, (make, path) in makers.items()
    }
    times: dict[str, list[float]] = {name: [] for name in graphs}
    cpu: dict[str, list[float]] = {name: [] for name in graphs}
    for graph in graphs.values():
        for _ in range(5):
            graph.step()
    for _ in range(args.rounds):
        for name, graph in graphs.items():
            for _ in range(args.steps):
                wall, used = graph.step()
                times[name].append(wall * 1e3)
                cpu[name].append(used * 1e3)
    spin = "sleeping" if args.no_spin else "spinning"
    load = os.getloadavg()[0]
    print(
        f"{args.rows} row(s) x {args.tokens} token(s) after {args.past}, {args.threads} {spin} threads, load {load:.1f}; ms a step"
    )
    for name, ms in times.items():
        quarter = statistics.quantiles(ms, n=4)[0]
        print(
            f"  {name:24s} wall min {min(ms):7.3f}  p25 {quarter:7.3f}  median {statistics.median(ms):7.3f}"
            f"  CPU median {statistics.median(cpu[name]):7.3f}"
        )
    if args.profile:
        with tempfile.TemporaryDirectory() as tmp:
            for name, (make, path) in makers.items():
                graph = make(path, args.past, args.threads, str(Path(tmp) / "profile"), args.tokens)
                print_profile(name, *op_profile(graph, args.steps), args.top)


if __name__ == "__main__":
    main()
