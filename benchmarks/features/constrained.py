"""Structured output's cost: decode speed with a JSON schema against free decoding, side by side.

The same chat prompts decode free and held to a schema, at batch 1 and batch 8, in alternating
rounds (median figures). Reported per batch size: decode tokens/s free and constrained and their
ratio, the first-token delay each way (a schema adds its grammar's start-up), and the time one
step spends computing masks (measured on the grammar engine alone, over the replies' own
tokens, so it can be set against the step time: the engine computes masks while the model runs).

    python benchmarks/features/constrained.py smollm2-135m-instruct --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from clika_runtime import modelverse
from clika_runtime.grammar import constraint_from
from clika_runtime.grammar.masks import StepMasks
from clika_runtime.grammar.matcher import GrammarMatcher
from clika_runtime.grammar.vocabulary import grammar_vocabulary
from clika_runtime.store import resolve

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        # Long enough that no reply completes within the token budget: both sides decode the same
        # number of tokens, so the ratio is the cost of the masks, not of shorter replies.
        "bio": {"type": "string", "minLength": 2000},
    },
    "required": ["name", "age", "hobbies", "bio"],
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
PROMPTS = [
    "Describe a fictional chess player as JSON.",
    "Invent a painter from Lisbon and describe them as JSON.",
    "Describe a retired sailor as JSON.",
    "Make up a baker who runs marathons; answer as JSON.",
    "Describe a young astronomer as JSON.",
    "Invent a beekeeper from Kyoto; answer as JSON.",
    "Describe a violin maker as JSON.",
    "Make up a mountain guide; answer as JSON.",
]


def one(model: modelverse.GenerativeModel, prompt: str, constrained: bool, new_tokens: int) -> dict:
    options = {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": not constrained}
    if constrained:
        options["response_format"] = FORMAT
    stream = model.stream_generate(messages=[{"role": "user", "content": prompt}], **options)
    text = "".join(stream)
    report = stream.report
    return {
        "text": text,
        "tokens": report.completion_tokens,
        "ttft": report.time_to_first_token_s or 0.0,
        "rate": report.decode_tokens_per_s or 0.0,
    }


def batch(model: modelverse.GenerativeModel, size: int, constrained: bool, new_tokens: int) -> dict:
    prompts = PROMPTS[:size]
    began = time.perf_counter()
    with ThreadPoolExecutor(size) as pool:
        results = list(pool.map(lambda p: one(model, p, constrained, new_tokens), prompts))
    wall = time.perf_counter() - began
    tokens = sum(r["tokens"] for r in results)
    return {"tok_s": tokens / wall, "ttft": statistics.median(r["ttft"] for r in results), "texts": results}


def mask_time_us(model: modelverse.GenerativeModel, texts: list[str]) -> float:
    """Median time to compute one step's masks for ``len(texts)`` rows, walking the replies' tokens."""
    vocabulary = grammar_vocabulary(model.tokenizer, model.vocab_size)
    matchers = [GrammarMatcher(constraint_from(FORMAT), vocabulary) for _ in texts]
    tokens = [model.tokenizer.encode(t, add_special_tokens=False) for t in texts]
    times = []
    for step in range(max(len(t) for t in tokens)):
        live = [m for m, t in zip(matchers, tokens, strict=True) if step < len(t) and not m.finished]
        if not live:
            break
        began = time.perf_counter()
        StepMasks.of(live, model.vocab_size).start().wait()
        times.append(time.perf_counter() - began)
        for matcher, ids in zip(matchers, tokens, strict=True):
            if step < len(ids) and not matcher.finished:
                matcher.accept(ids[step])
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    for name in args.models:
        model = modelverse.load(resolve(name).folder, threads=args.threads, max_active=8)
        batch(model, 1, True, 8)  # warm-up: sessions, the grammar vocabulary
        print(f"\n## {name}\n")
        print(
            "| batch | free tok/s | constrained tok/s | ratio | TTFT free / constrained (ms) | mask us/step |"
        )
        print("|---|---|---|---|---|---|")
        for size in (1, 8):
            free, held, ttft_free, ttft_held = [], [], [], []
            last = None
            for _ in range(args.rounds):
                f = batch(model, size, False, args.new_tokens)
                c = batch(model, size, True, args.new_tokens)
                free.append(f["tok_s"])
                held.append(c["tok_s"])
                ttft_free.append(f["ttft"])
                ttft_held.append(c["ttft"])
                last = c
            masks = mask_time_us(model, [r["text"] for r in last["texts"]])
            f_med, c_med = statistics.median(free), statistics.median(held)
            print(
                f"| {size} | {f_med:.1f} | {c_med:.1f} | {c_med / f_med:.2f}x | "
                f"{statistics.median(ttft_free) * 1e3:.0f} / {statistics.median(ttft_held) * 1e3:.0f} | {masks:.0f} |"
            )
        model.close()


if __name__ == "__main__":
    main()
