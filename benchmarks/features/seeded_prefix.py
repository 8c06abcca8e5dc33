"""How often a seeded sampled reply changes when its prompt's prefix comes from the cache.

The same chat prompt runs with seeds ``0..N-1`` (temperature 0.8, top-k 40,
top-p 0.95, min-p 0.05: ``clika chat``'s sampling) on two engines of one model:
one without prefix reuse (every prompt computed whole, in one step) and one
whose prefix cache holds the prompt. A seed's two replies are compared token by
token; the first sampled step's logits, whose context is the same token ids in
both, value by value; the greedy reply too. A control runs the uncached engine
twice: it must agree with itself. Requests run one at a time (``--batch 1``,
as in the report that three identical requests differ) or ``--batch`` at once.

``--tail`` is how many of a cached prompt's last tokens are computed again
(``kv_cache.RECOMPUTED_TAIL``, 2): ``--tail 1`` measures the runtime before it
was raised from 1 (a step of one token takes another int4 kernel than a step
of more, whose rounding differs).

    python benchmarks/features/seeded_prefix.py smollm2-135m-instruct --seeds 200 --mode paged --tail 1

Measured on SmolLM2-135M-Instruct int4, paged KV, a 37-token prompt, 24 new
tokens, requests alone, a 2-core machine under load (``--seeds 200 --new-tokens
24 --mode paged --tail 1``, then ``--tail 2``): with one token computed again
(before), 117 of 200 seeded replies differed cached against uncached (the
first differing token: median 13th, from the 1st to the 23rd), the greedy reply
too, and the first step's logits by up to 0.0064; the uncached engine agreed
with itself (0 of 200). With two tokens computed again: 0 of 200, the first
step's logits equal, the greedy reply the same. At ``--batch 8`` (every step
of several tokens) the old rule gave 0 of 200 as well.
Not measured by this script: 48 seeds of the same prompt alone against 8 at
a time (no prefix reuse): 33 differed; the greedy replies agreed.
"""

from __future__ import annotations

import argparse

import numpy as np

from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.kv import kv_cache
from clika_runtime.store import resolve

SAMPLED = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant who tells short stories."},
    {"role": "user", "content": "Tell me a story about a dragon who learns to bake bread."},
]


class FirstLogits:
    """Keeps the logits each request's first sampled step saw (wraps the engine's sampler)."""

    def __init__(self, engine) -> None:
        self.first: dict[int, np.ndarray] = {}
        sampler = engine.core.sampler
        original = sampler.sample

        def sample(logits, request_ids, configs, prompts):
            for i, rid in enumerate(request_ids):
                self.first.setdefault(rid, np.array(logits[i], dtype=np.float32))
            return original(logits, request_ids, configs, prompts)

        sampler.sample = sample


def replies(
    engine, ids: list[int], seeds: range, new_tokens: int, batch: int
) -> list[tuple[list[int], int, int]]:
    """(tokens, cached tokens, request id) per seed, ``batch`` requests submitted at a time."""
    out = []
    for start in range(0, len(seeds), batch):
        streams = [
            engine.submit(ids, GenerationConfig(max_new_tokens=new_tokens, seed=seed, **SAMPLED))
            for seed in seeds[start : start + batch]
        ]
        for stream in streams:
            tokens = [t for d in stream for t in d.token_ids]
            out.append((tokens, stream.report.cached_tokens, stream.request_id))
    return out


def greedy(engine, ids: list[int], new_tokens: int) -> list[int]:
    stream = engine.submit(ids, GenerationConfig(max_new_tokens=new_tokens))
    return [t for d in stream for t in d.token_ids]


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--mode", choices=["continuous", "paged"], default="paged")
    parser.add_argument("--batch", type=int, default=1, help="requests submitted together")
    parser.add_argument("--tail", type=int, default=kv_cache.RECOMPUTED_TAIL, help="see the docstring")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    kv_cache.RECOMPUTED_TAIL = args.tail
    folder = resolve(args.model, None, pull=True, say=print, progress=True).folder
    common = {"threads": args.threads, "kv_cache_mode": args.mode, "max_active": args.batch}
    uncached = modelverse.load(folder, prefix_reuse=False, **common)
    cached = modelverse.load(folder, **common)
    ids = cached.tokenizer.encode(cached.render(MESSAGES))
    seeds = range(args.seeds)
    try:
        greedy_cold = greedy(uncached.engine, ids, args.new_tokens)
        greedy(cached.engine, ids, args.new_tokens)  # fills the prefix cache
        greedy_warm = greedy(cached.engine, ids, args.new_tokens)
        cold_logits, warm_logits = FirstLogits(uncached.engine), FirstLogits(cached.engine)
        cold = replies(uncached.engine, ids, seeds, args.new_tokens, args.batch)
        control = replies(uncached.engine, ids, seeds, args.new_tokens, args.batch)
        warm = replies(cached.engine, ids, seeds, args.new_tokens, args.batch)
    finally:
        uncached.close()
        cached.close()
    differ = [first_difference(c[0], w[0]) for c, w in zip(cold, warm, strict=True)]
    changed = [d for d in differ if d is not None]
    spread = [
        float(np.abs(cold_logits.first[c[2]] - warm_logits.first[w[2]]).max())
        for c, w in zip(cold, warm, strict=True)
    ]
    print(
        f"model {args.model}, {args.mode} KV, prompt of {len(ids)} tokens, {args.new_tokens} new tokens, "
        f"batch {args.batch}, tail {args.tail}"
    )
    print(f"cached tokens: uncached {cold[0][1]}, cached {min(w[1] for w in warm)}-{max(w[1] for w in warm)}")
    print(f"greedy reply the same with and without the cached prefix: {greedy_cold == greedy_warm}")
    print(f"control (uncached twice): {sum(c[0] != k[0] for c, k in zip(cold, control, strict=True))} differ")
    print(f"seeded replies that differ cached vs uncached: {len(changed)} of {len(differ)}")
    if changed:
        print(
            f"  first differing token: median {int(np.median(changed))}, min {min(changed)}, max {max(changed)}"
        )
    print(
        f"max |logit difference| of the first sampled step: {max(spread):.3g} (median {np.median(spread):.3g})"
    )


if __name__ == "__main__":
    main()
