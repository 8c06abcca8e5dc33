"""Decode speed with and without an assistant model drafting, side by side in one run.

The target model decodes each workload greedily alone and with the assistant
drafting ``num_assistant_tokens`` a step, in alternating rounds; the figures
are median decode rates, their ratio, the last round's tally of confirmed
drafts and whether the reply equals the plain one (int4 kernels may flip a
near-tie). The workloads are ``prompt_lookup.py``'s.

    python benchmarks/features/assisted.py qwen2.5-coder-1.5b-instruct qwen2.5-coder-0.5b-instruct
"""

from __future__ import annotations

import argparse

from prompt_lookup import compare_drafting, workloads

from clika_runtime import modelverse
from clika_runtime.store import resolve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("assistant", nargs="?", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--drafts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    folder = resolve(args.target, None, pull=True, say=print).folder
    helper = resolve(args.assistant, None, pull=True, say=print).folder
    model = modelverse.load(folder, threads=args.threads, assistant_model=helper)
    print(
        f"| {args.target} with {args.assistant} | plain tok/s | assisted tok/s | ratio | confirmed / drafted | same reply |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for workload, prompt in workloads().items():
        cells = compare_drafting(
            model, prompt, "num_assistant_tokens", args.drafts, rounds=args.rounds, new_tokens=args.new_tokens
        )
        print(f"| {workload} | {cells} |")
    model.close()


if __name__ == "__main__":
    main()
