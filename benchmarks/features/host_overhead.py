"""Python's share of a decode step: the engine's host time beside the whole step.

Four greedy chat requests decode together on one engine; each step's stage
event reports its seconds and the host (Python) part of them. Printed: the
median of both over the decode steps (at most 4 tokens a step) and their
ratio. The engine is built so the host part stays a small fraction of a
step; a timing like this belongs here, not in the tests.

    python benchmarks/features/host_overhead.py smollm2-135m-instruct --threads 1
"""

from __future__ import annotations

import argparse
import statistics

from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.stages import StageEvent

QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colours.",
    "Why is the sky blue?",
    "Write a haiku about autumn.",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="a catalog name or a model folder")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    model = modelverse.load(args.model, threads=args.threads)
    events: list[StageEvent] = []
    engine = model.create_engine(max_active=len(QUESTIONS), observer=events.append)
    prompts = [model.tokenizer.encode(model.render([{"role": "user", "content": q}])) for q in QUESTIONS]
    streams = [engine.submit(p, GenerationConfig(max_new_tokens=args.tokens)) for p in prompts]
    for stream in streams:
        stream.result()
    engine.close()
    model.close()
    decode = [e for e in events if e.stage == "step" and e.tokens <= len(QUESTIONS)]
    host = statistics.median(e.detail["host_s"] for e in decode)
    step = statistics.median(e.seconds for e in decode)
    print(
        f"decode steps {len(decode)}: step {step * 1e3:.2f} ms, host {host * 1e3:.3f} ms ({host / step:.1%})"
    )


if __name__ == "__main__":
    main()
