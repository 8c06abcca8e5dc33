"""Decode speed and KV memory of the float32 and int8 KV caches, side by side in one run.

For each context length and batch size, both caches of the same model folder
run the same prompts through the real engine (``generate_batch``, greedy,
EOS ignored) in alternating rounds; the figure is the median decode rate and
its ratio int8 / float32 (this VM's speed drifts, so only ratios within one
run mean anything), plus the KV bytes each engine held.

    python benchmarks/features/kv_cache_dtype.py smollm2-135m-instruct --contexts 256 1024 --batches 1 8 [--mode paged]
"""

from __future__ import annotations

import argparse
import statistics

from clika_runtime import modelverse
from clika_runtime.store import resolve

DTYPES = ("float32", "int8")
WORDS = (
    "the quick brown fox jumps over the lazy dog while a river runs past old mills and green hills".split()
)


def prompt_of(model: modelverse.GenerativeModel, tokens: int, salt: int) -> str:
    """Plain text of about ``tokens`` tokens, different for each ``salt`` (no shared prefix to reuse)."""
    words = [WORDS[(i * 7 + salt * 13) % len(WORDS)] for i in range(tokens * 2)]
    text = " ".join(words)
    ids = model.tokenizer.encode(text)[:tokens]
    return f"{salt}: " + model.tokenizer.decode(ids)


def decode_rate(model: modelverse.GenerativeModel, prompts: list[str], new_tokens: int) -> float:
    """Aggregate decode tokens per second of one batch (time after each request's first token)."""
    model.generate_batch(prompts, max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    return sum(report.decode_tokens_per_s or 0.0 for report in model.reports)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--mode", choices=["continuous", "paged"], default="continuous", help="KV cache mode")
    args = parser.parse_args()
    folder = resolve(args.model, None, pull=True, say=print, progress=True).folder
    models = {
        d: modelverse.load(folder, threads=args.threads, kv_cache_mode=args.mode, kv_cache_dtype=d)
        for d in DTYPES
    }
    print("| context | batch | float32 tok/s | int8 tok/s | int8 / float32 | KV MiB float32 | KV MiB int8 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for context in args.contexts:
        for batch in args.batches:
            prompts = [prompt_of(models["float32"], context, salt) for salt in range(batch)]
            rates: dict[str, list[float]] = {d: [] for d in DTYPES}
            for _ in range(args.rounds):
                for dtype, model in models.items():
                    rates[dtype].append(decode_rate(model, prompts, args.new_tokens))
            median = {d: statistics.median(r) for d, r in rates.items()}
            kv = {d: m.residency["pipeline"]["kv_cache_bytes"] / 2**20 for d, m in models.items()}
            print(
                f"| {context} | {batch} | {median['float32']:.1f} | {median['int8']:.1f} | "
                f"{median['int8'] / median['float32']:.2f} | {kv['float32']:.0f} | {kv['int8']:.0f} |"
            )
    for model in models.values():
        model.close()


if __name__ == "__main__":
    main()
