"""The fuzz tier's long run: every target of tests/fuzz with its budget scaled to CASES in all.

    python benchmarks/fuzz/run.py                 # 1,000,000 generated cases across the targets
    python benchmarks/fuzz/run.py --cases 200000 -k gguf
    python benchmarks/fuzz/run.py --report fuzz.json   # also write the per-target figures

The CI budgets (``@budget(N)`` in tests/fuzz) are multiplied by one factor so
each target keeps its share. Each target runs in pytest processes of at most
``--chunk`` cases (a fresh random seed each, so a long run is many short
ones: memory stays flat and a failure costs only its chunk); pytest prints
any failing case Hypothesis found with the seed that replays it. The run
ends with the cases tried per target, the failed chunks and the time taken.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "tests" / "fuzz"
# "@budget(700)" then, a decorator or two later, "def test_name(": one target.
TARGET = re.compile(r"@budget\((\d+)\)\s*\n(?:@.*\n)*def (test_\w+)\(")
# conftest's summary lines: "  manifest: 1234".
COUNTED = re.compile(r"^  (.+): (\d+)$", re.M)


@dataclass(frozen=True)
class Target:
    node: str  # pytest node id, relative to the checkout
    budget: int  # its CI cases


@dataclass
class Tally:
    cases: dict[str, int] = field(default_factory=dict)
    failed_runs: list[str] = field(default_factory=list)
    runs: int = 0

    def add(self, output: str) -> None:
        for name, count in COUNTED.findall(output):
            self.cases[name] = self.cases.get(name, 0) + int(count)


def targets(selector: str | None) -> list[Target]:
    found = []
    for path in sorted(FUZZ.glob("test_*.py")):
        for budget, name in TARGET.findall(path.read_text()):
            node = f"{path.relative_to(ROOT)}::{name}"
            if selector is None or selector.lower() in node.lower():
                found.append(Target(node, int(budget)))
    return found


def chunks(cases: int, chunk: int) -> list[int]:
    """``cases`` split into near-equal runs of at most ``chunk``."""
    runs = max(1, math.ceil(cases / chunk))
    return [cases // runs + (1 if i < cases % runs else 0) for i in range(runs)]


def run_chunk(target: Target, cases: int) -> tuple[bool, str]:
    command = [sys.executable, "-m", "pytest", "-m", "fuzz", target.node, "-q", "-p", "no:cacheprovider"]
    env = {**os.environ, "CLIKA_FUZZ_SCALE": f"{cases / target.budget:.6f}"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    return done.returncode == 0, done.stdout + done.stderr


def progress(done: int, total: int, started: float) -> str:
    elapsed = time.monotonic() - started
    eta = elapsed / done * (total - done) if done else 0.0
    return f"{done:,}/{total:,} cases planned, {elapsed / 60:.1f} min, ETA {eta / 60:.1f} min"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cases", type=int, default=1_000_000, help="generated cases in all (default 1,000,000)"
    )
    parser.add_argument("-k", default=None, help="only the targets whose node id contains this")
    parser.add_argument("--chunk", type=int, default=25_000, help="most cases in one pytest run")
    parser.add_argument("--report", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    chosen = targets(args.k)
    if not chosen:
        parser.error(f"no fuzz target matches {args.k!r}")
    scale = args.cases / sum(t.budget for t in chosen)
    plan = [(t, n) for t in chosen for n in chunks(round(t.budget * scale), args.chunk)]
    total = sum(n for _, n in plan)
    print(f"{len(chosen)} targets, {len(plan)} runs, {total:,} cases (CI budgets x{scale:.1f})", flush=True)
    tally, started, done = Tally(), time.monotonic(), 0
    for target, cases in plan:
        passed, output = run_chunk(target, cases)
        tally.add(output)
        tally.runs += 1
        done += cases
        if not passed:
            tally.failed_runs.append(target.node)
            print(output[-4000:], flush=True)
        print(
            f"{'ok  ' if passed else 'FAIL'} {target.node} ({cases:,}); {progress(done, total, started)}",
            flush=True,
        )
    elapsed = time.monotonic() - started
    print(f"\n{sum(tally.cases.values()):,} generated cases in {elapsed / 60:.1f} min, "
          f"{len(tally.failed_runs)} failed runs of {tally.runs}")  # fmt: skip
    for name, count in sorted(tally.cases.items()):
        print(f"  {name}: {count:,}")
    if args.report:
        report = {
            "cases": tally.cases,
            "failed_runs": tally.failed_runs,
            "runs": tally.runs,
            "seconds": elapsed,
        }
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if tally.failed_runs else 0


if __name__ == "__main__":
    raise SystemExit(main())
