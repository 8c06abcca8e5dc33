"""Decode speed with and without prompt-lookup drafting, side by side in one run.

Three greedy workloads: editing code (the reply repeats most of the prompt),
quoting notes back with small changes, and W1's open question (little to
look up: the cost of drafting when guesses fail). Each runs with and without
``prompt_lookup_num_tokens`` in alternating rounds; the figures are median
decode rates, their ratio, how many drafted tokens the model confirmed and
whether the reply equals the plain one (int4 kernels may flip a near-tie).

    python benchmarks/features/prompt_lookup.py smollm2-135m-instruct qwen2.5-coder-0.5b-instruct
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from clika_runtime import modelverse
from clika_runtime.store import resolve

CODE = """def mean(values):
    total = 0
    for value in values:
        total = total + value
    return total / len(values)


def variance(values):
    m = mean(values)
    total = 0
    for value in values:
        total = total + (value - m) ** 2
    return total / len(values)
"""


def workloads() -> dict[str, str]:
    prompts = json.loads((Path(__file__).resolve().parents[1] / "prompts.json").read_text(encoding="utf-8"))
    notes = prompts["w2"].split("\n\n", 1)[1]
    return {
        "edit code": f"Add type hints to this Python code. Change nothing else.\n\n{CODE}",
        "quote notes": f"Copy these notes, replacing every 'thousand' with '000':\n\n{notes[:1200]}",
        "open question": prompts["w1"],
    }


def compare_drafting(
    model: modelverse.GenerativeModel, prompt: str, option: str, drafts: int, *, rounds: int, new_tokens: int
) -> str:
    """Table cells "plain | drafting | ratio | confirmed / drafted | same reply" for ``prompt``
    decoded greedily without and with ``option=drafts`` in alternating rounds (median rates,
    the last round's tally)."""
    rates: dict[int, list[float]] = {0: [], drafts: []}
    texts: dict[int, str] = {}
    tally = (0, 0)
    for _ in range(rounds):
        for n in rates:
            texts[n] = model.generate(prompt, max_new_tokens=new_tokens, temperature=0.0, **{option: n})
            report = model.report
            rates[n].append(report.decode_tokens_per_s or 0.0)
            if n:
                tally = (report.accepted_draft_tokens, report.draft_tokens)
    plain, drafted = (statistics.median(r) for r in rates.values())
    same = "yes" if texts[0] == texts[drafts] else "no"
    return f"{plain:.1f} | {drafted:.1f} | {drafted / plain:.2f} | {tally[0]} / {tally[1]} | {same}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["smollm2-135m-instruct"])
    parser.add_argument("--lookup", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    print("| model | workload | plain tok/s | drafting tok/s | ratio | confirmed / drafted | same reply |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name in args.models:
        model = modelverse.load(resolve(name, None, pull=True, say=print).folder, threads=args.threads)
        for workload, prompt in workloads().items():
            cells = compare_drafting(
                model,
                prompt,
                "prompt_lookup_num_tokens",
                args.lookup,
                rounds=args.rounds,
                new_tokens=args.new_tokens,
            )
            print(f"| {name} | {workload} | {cells} |")
        model.close()


if __name__ == "__main__":
    main()
