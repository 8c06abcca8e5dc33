"""Paged KV cache and prefix reuse on SmolLM2-135M-Instruct: decode speed, chat TTFT, shared-prompt memory.

    python benchmarks/features/paged.py                 # int4 export of the catalog's SmolLM2, 1 thread
    python benchmarks/features/paged.py --parts decode --reps 30
    python benchmarks/features/paged.py --model path/to/folder --threads 2 --parts chat,memory

Parts (each prints its figures, then one JSON line with all of them):

* ``decode``: one decode step of the whole graph, paged vs continuous, at
  batch 1 and 8 and context 256 and 1024 (random KV of that length, the
  sequence's blocks scattered through the pool), median of ``--reps`` calls;
* ``chat``: a 5-turn chat of about 40-token user turns; turn 5's time to first
  token with the cache kept from turn 4, as a ratio to re-reading the whole
  history (a fresh engine, prefix reuse off), in both KV modes; then the same
  with a template that strips earlier turns' reasoning blocks (Qwen3-style), as
  a ratio to the template that keeps them. Turns 1-4 leave in the cache what a
  reply leaves (the prompt, then the reply as the model's tokens);
* ``memory``: 32 concurrent requests sharing a 512-token system prompt, paged:
  the KV bytes their blocks hold once all 32 run with their prompts computed,
  shared vs prefix reuse off.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from clika_runtime import modelverse
from clika_runtime.chat.templates.chat_template import ChatTemplate
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_session, session_options
from clika_runtime.contract.paged_step_graph import PagedRow, pack_paged_step
from clika_runtime.contract.step_graph import pack_step
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.stages import StageEvent

REPO_DIR = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = "smollm2-135m-instruct"

USER_TURNS = [
    "I am planning a small vegetable garden on a sunny balcony in a city apartment. Which five vegetables "
    "would you start with, and why do they suit containers better than others?",
    "Good list. How deep should the containers be for the tomatoes and the peppers, and what kind of soil "
    "mix would you fill them with so that the roots stay healthy all summer?",
    "The balcony gets about six hours of direct sun, mostly in the afternoon. Does that change which plants "
    "I should put closest to the railing, and should I worry about the heat?",
    "How often should I water everything during a hot week in July, and is there a simple way to tell "
    "whether a pot is too dry or too wet without buying special tools?",
    "Finally, which pests are most likely to show up on a balcony garden like this one, and what gentle "
    "remedies can I try before reaching for any chemical sprays at all?",
]
ANSWERS = [
    "Start with cherry tomatoes, peppers, lettuce, radishes and bush beans: they stay compact, grow fast "
    "and forgive small mistakes, while squash and corn sprawl or need far more room than a pot gives.",
    "Give tomatoes and peppers at least thirty centimetres of depth. Fill the pots with a light mix of "
    "compost, coconut coir and some perlite so water drains and the roots get air.",
    "Put the tall tomatoes toward the back so they do not shade the rest, and the lettuce where it gets "
    "some afternoon shade. On very hot days a light cloth keeps leaves from scorching.",
    "In a hot week most pots need water every morning. Push a finger into the soil: dry two centimetres "
    "down means water now, damp means wait, and a soggy smell means you watered too much.",
]
REASONING = [
    "The user wants container vegetables. Compact, fast and forgiving plants fit best; list five and say why.",
    "Depth for fruiting plants, then a soil mix that drains well. Keep it practical and short.",
    "Afternoon sun is strong. Placement by height, shade for lettuce, and protection from heat.",
    "Daily watering in heat; a finger test is the simplest tool. Mention overwatering signs.",
]
# ChatML that shows an assistant turn's reasoning only after the last user message (as Qwen3's does).
# No whitespace control: a turn renders exactly the text the model generated for it.
STRIPPING_TEMPLATE = (
    "{% set ns = namespace(last_user=-1) %}"
    "{% for m in messages %}{% if m['role'] == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and m.get('reasoning_content') and loop.index0 > ns.last_user %}"
    "<think>\n{{ m['reasoning_content'] }}\n</think>\n\n"
    "{% endif %}"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
KEEPING_TEMPLATE = STRIPPING_TEMPLATE.replace(" and loop.index0 > ns.last_user", "")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="a model folder (default: the catalog's SmolLM2 exported at --precision)")
    ap.add_argument("--precision", default="int4")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=15, help="decode steps timed per case")
    ap.add_argument("--chat-reps", type=int, default=3, help="5-turn chats per case")
    ap.add_argument("--parts", default="decode,chat,memory")
    return ap.parse_args()


def model_folder(args: argparse.Namespace) -> Path:
    if args.model:
        from clika_export.graph.paged_graph import ensure_paged_graph

        ensure_paged_graph(Path(args.model))
        return Path(args.model)
    from clika_export.api import cached_export
    from clika_export.pull.fetch import fetch_gguf

    return cached_export(fetch_gguf(DEFAULT_MODEL, progress=False), args.precision, progress=False)


def meta(folder: Path, threads: int) -> dict:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_DIR, capture_output=True, text=True
    )
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in _cpuinfo() if ln.startswith("model name")), platform.machine()
    )
    manifest = Manifest.read(folder)
    return {
        "commit": commit.stdout.strip(),
        "onnxruntime": ort.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "load_average": os.getloadavg()[0],
        "model": manifest.provenance.source,
        "weights": manifest.precision.get("weights"),
        "block_size": manifest.graphs["paged"].kv.block_size,
    }


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


# -- decode step: paged vs continuous ----------------------------------------------------


class BoundGraph:
    """One session with KV buffers bound in place and the step inputs bound once."""

    def __init__(
        self, path: Path, manifest: Manifest, threads: int, buffers: list[tuple[np.ndarray, np.ndarray]]
    ) -> None:
        self.session = open_session(path, session_options(threads), manifest.rope_tables)
        self.binding = self.session.io_binding()
        self._keep: list = []
        for layer, (key, value) in enumerate(buffers):
            for kind, array in (("key", key), ("value", value)):
                shared = ort.OrtValue.ortvalue_from_numpy(array)
                self.binding.bind_ortvalue_input(f"past_{kind}.{layer}", shared)
                self.binding.bind_ortvalue_output(f"present_{kind}.{layer}", shared)
                self._keep.append(shared)

    def feed(self, feeds: dict[str, np.ndarray], rows: int, vocab: int) -> np.ndarray:
        for name, array in feeds.items():
            kept = np.ascontiguousarray(array)
            value = ort.OrtValue.ortvalue_from_numpy(kept)
            self.binding.bind_ortvalue_input(name, value)
            self._keep.append((kept, value))
        logits = np.empty((rows, vocab), np.float32)
        value = ort.OrtValue.ortvalue_from_numpy(logits)
        self.binding.bind_ortvalue_output("logits", value)
        self._keep.append((logits, value))
        return logits

    def run(self) -> float:
        began = time.perf_counter()
        self.session.run_with_iobinding(self.binding)
        return time.perf_counter() - began


def interleaved(graphs: list[BoundGraph], reps: int) -> list[float]:
    """Median call time of each graph, calls alternating so both see the same machine load."""
    for graph in graphs:
        for _ in range(3):
            graph.run()
    times: list[list[float]] = [[] for _ in graphs]
    for _ in range(reps):
        for graph, kept in zip(graphs, times, strict=True):
            kept.append(graph.run())
    return [statistics.median(kept) for kept in times]


def decode_case(folder: Path, manifest: Manifest, batch: int, context: int, args) -> dict:
    arch = manifest.architecture
    paged_spec = manifest.graphs["paged"]
    bs = paged_spec.kv.block_size
    rng = np.random.default_rng(0)
    kv_shape = (batch, arch.num_kv_heads, context, arch.head_dim)
    history = [
        (rng.standard_normal(kv_shape, np.float32) * 0.5, rng.standard_normal(kv_shape, np.float32) * 0.5)
    ]
    history *= arch.num_layers  # the same random KV in every layer: content does not change the cost
    tokens = rng.integers(0, 1000, batch).tolist()

    capacity = context + 256  # slack above the sequence, as the engine keeps
    slots = []
    for key, value in history:
        k = np.zeros((batch, arch.num_kv_heads, capacity, arch.head_dim), np.float32)
        v = np.zeros_like(k)
        k[:, :, :context], v[:, :, :context] = key, value
        slots.append((k, v))
    continuous = BoundGraph(folder / manifest.graphs["continuous"].file, manifest, args.threads, slots)
    rows = [(context, [t], False) for t in tokens]
    continuous.feed(pack_step(rows, capacity=capacity).feeds(), batch, arch.vocab_size)

    per_row = -(-(context + 1) // bs)
    num_blocks = batch * per_row + 8
    tables = rng.permutation(num_blocks)[: batch * per_row].reshape(batch, per_row)
    pools = []
    for key, value in history:
        shape = (arch.num_kv_heads, num_blocks, bs, arch.head_dim)
        pk, pv = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        for b in range(batch):
            for m in range(per_row):
                lo, hi = m * bs, min((m + 1) * bs, context)
                if hi > lo:
                    pk[:, tables[b, m], : hi - lo] = key[b, :, lo:hi]
                    pv[:, tables[b, m], : hi - lo] = value[b, :, lo:hi]
        pools.append((pk, pv))
    paged = BoundGraph(folder / paged_spec.file, manifest, args.threads, pools)
    packed = pack_paged_step(
        [PagedRow(context, [t], tables[b].tolist()) for b, t in enumerate(tokens)], block_size=bs
    )
    paged.feed(packed.feeds(), batch, arch.vocab_size)
    t_continuous, t_paged = interleaved([continuous, paged], args.reps)
    return {
        "batch": batch,
        "context": context,
        "continuous_ms": t_continuous * 1e3,
        "paged_ms": t_paged * 1e3,
    }


def run_decode(folder: Path, args) -> list[dict]:
    manifest = Manifest.read(folder)
    results = []
    print("decode step (ms, median)          continuous   paged   paged/continuous")
    for batch in (1, 8):
        for context in (256, 1024):
            r = decode_case(folder, manifest, batch, context, args)
            r["ratio"] = r["paged_ms"] / r["continuous_ms"]
            print(
                f"  batch {batch}  context {context:5d}          {r['continuous_ms']:8.1f} "
                f"{r['paged_ms']:8.1f}   {r['ratio']:.2f}"
            )
            results.append(r)
    return results


# -- chat: turn 5 on the kept cache ---------------------------------------------------------


def turn_prompts(
    model, template: ChatTemplate | None, with_reasoning: bool
) -> tuple[list[list[int]], list[int]]:
    """Per turn 1-4 the tokens a reply leaves in the cache (prompt + reply); then turn 5's prompt."""
    render = template.render if template is not None else model.chat_template.render
    messages: list[dict] = []
    left = []
    for turn, answer in enumerate(ANSWERS):
        messages.append({"role": "user", "content": USER_TURNS[turn]})
        prompt = render(messages, add_generation_prompt=True)
        reply = answer
        if with_reasoning:
            reply = f"<think>\n{REASONING[turn]}\n</think>\n\n{answer}"
        left.append(model.tokenizer.encode(prompt + reply + "<|im_end|>"))
        message = {"role": "assistant", "content": answer}
        if with_reasoning:
            message["reasoning_content"] = REASONING[turn]
        messages.append(message)
    messages.append({"role": "user", "content": USER_TURNS[4]})
    return left, model.tokenizer.encode(render(messages, add_generation_prompt=True))


def turn5_ttft(model, left: list[list[int]], final: list[int], reuse: bool) -> tuple[float, int]:
    """Turn 5's time to first token (and its cached tokens) on a fresh engine that ran turns 1-4."""
    engine = model.create_engine(max_active=1, prefix_reuse=reuse)
    try:
        if reuse:
            for ids in left:
                engine.submit(ids, GenerationConfig(max_new_tokens=1)).result()
        stream = engine.submit(final, GenerationConfig(max_new_tokens=1))
        stream.result()
        return stream.report.time_to_first_token_s, stream.report.cached_tokens
    finally:
        engine.close()


def run_chat(folder: Path, args) -> dict:
    results: dict = {}
    print("5-turn chat, turn 5 TTFT (ms, median)   kept cache   whole history   ratio   cached/prompt")
    print("  (cached: every token before the first one where turn 5's prompt differs from turn 4's)")
    for mode in ("continuous", "paged"):
        model = modelverse.load(folder, threads=args.threads, kv_cache_mode=mode)
        keeping = ChatTemplate(KEEPING_TEMPLATE)
        stripping = ChatTemplate(STRIPPING_TEMPLATE)
        for name, template, reasoning in (
            ("model template", None, False),
            ("keeps reasoning", keeping, True),
            ("strips reasoning", stripping, True),
        ):
            left, final = turn_prompts(model, template, reasoning)
            kept = [turn5_ttft(model, left, final, True) for _ in range(args.chat_reps)]
            whole = [turn5_ttft(model, left, final, False)[0] for _ in range(args.chat_reps)]
            k, w = statistics.median(t for t, _ in kept), statistics.median(whole)
            cached = kept[0][1]
            # Reuse must reach the first token where turn 5's prompt differs from what turn 4 left.
            shared = zip(left[-1], final, strict=False)
            differs = next((i for i, (a, b) in enumerate(shared) if a != b), min(len(left[-1]), len(final)))
            assert cached == min(differs, len(final) - 1), (cached, differs)
            results[f"{mode}/{name}"] = {
                "kept_ms": k * 1e3,
                "whole_ms": w * 1e3,
                "ratio": k / w,
                "cached": cached,
                "prompt": len(final),
            }
            print(
                f"  {mode:10s} {name:17s}        {k * 1e3:8.1f}     {w * 1e3:8.1f}      {k / w:.2f}    {cached}/{len(final)}"
            )
        strip, keep = results[f"{mode}/strips reasoning"], results[f"{mode}/keeps reasoning"]
        results[f"{mode}/strip_vs_keep"] = strip["kept_ms"] / keep["kept_ms"]
        print(
            f"  {mode:10s} stripping template / keeping template (kept cache): {strip['kept_ms'] / keep['kept_ms']:.2f}"
        )
        model.close()
    return results


# -- memory: 32 requests sharing a system prompt ------------------------------------------


def kv_bytes_when_all_run(model, prompts: list[list[int]], reuse: bool) -> tuple[int, float]:
    """KV bytes the requests' blocks hold once all of them run with their prompts computed, and the time to get there."""
    held: list[int] = []
    engine = None

    def on_step(event: StageEvent) -> None:  # runs on the engine thread, between steps
        if event.stage != "step" or engine is None or held:
            return
        running = engine.scheduler.running
        if len(running) == len(prompts) and all(s.num_completion_tokens > 0 for s in running):
            held.append(engine.cache.pool.num_owned * engine.cache.block_bytes)

    engine = model.create_engine(
        max_active=len(prompts),
        max_step_tokens=1024,
        prefix_reuse=reuse,
        kv_cache_bytes=4 << 30,
        observer=on_step,
    )
    began = time.perf_counter()
    # Long replies keep the first requests running until the last prompt is computed.
    streams = [engine.submit(p, GenerationConfig(max_new_tokens=2000, ignore_eos=True)) for p in prompts]
    while not held:
        time.sleep(0.01)
    seconds = time.perf_counter() - began
    for stream in streams:
        stream.cancel()
    engine.close()
    return held[0], seconds


def run_memory(folder: Path, args) -> dict:
    model = modelverse.load(folder, threads=args.threads, kv_cache_mode="paged")
    rng = np.random.default_rng(0)
    system = rng.integers(100, 40000, 512).tolist()
    prompts = [system + rng.integers(100, 40000, 24).tolist() for _ in range(32)]
    shared, t_shared = kv_bytes_when_all_run(model, prompts, True)
    unshared, t_unshared = kv_bytes_when_all_run(model, prompts, False)
    model.close()
    print("32 running requests, 536-token prompts sharing a 512-token system prompt (paged): KV bytes held")
    print(f"  shared   {shared / 2**20:8.1f} MiB   (all running after {t_shared:.1f} s)")
    print(f"  unshared {unshared / 2**20:8.1f} MiB   (all running after {t_unshared:.1f} s)")
    print(f"  ratio    {shared / unshared:.2f}")
    return {"shared_bytes": shared, "unshared_bytes": unshared, "ratio": shared / unshared}


def main() -> None:
    args = parse_args()
    folder = model_folder(args)
    info = meta(folder, args.threads)
    print(json.dumps(info))
    parts = set(args.parts.split(","))
    figures: dict = {"meta": info}
    if "decode" in parts:
        figures["decode"] = run_decode(folder, args)
    if "chat" in parts:
        figures["chat"] = run_chat(folder, args)
    if "memory" in parts:
        figures["memory"] = run_memory(folder, args)
    print(json.dumps(figures))


if __name__ == "__main__":
    sys.exit(main())
