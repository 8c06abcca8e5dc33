"""The fuzz tier's long run: every target of tests/fuzz with its budget scaled to CASES in all.

    python benchmarks/fuzz/run.py                 # 1,000,000 generated cases across the targets
    python benchmarks/fuzz/run.py --cases 200000 -k gguf

The CI budgets (``@budget(N)`` in tests/fuzz) are multiplied by one factor so
each target keeps its share; pytest prints the cases run per target and any
failing case Hypothesis found (with the seed that replays it).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "tests" / "fuzz"


def ci_cases() -> int:
    """The cases of one CI run: the sum of the targets' budgets."""
    return sum(int(n) for f in FUZZ.glob("test_*.py") for n in re.findall(r"@budget\((\d+)\)", f.read_text()))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cases", type=int, default=1_000_000, help="generated cases in all (default 1,000,000)"
    )
    parser.add_argument("-k", default=None, help="only the targets pytest's -k selects")
    args = parser.parse_args()
    scale = args.cases / ci_cases()
    print(f"{ci_cases()} cases per CI run; scale {scale:.1f} for {args.cases:,}", flush=True)
    command = [sys.executable, "-m", "pytest", "-m", "fuzz", str(FUZZ), "-q", "-p", "no:cacheprovider"]
    if args.k:
        command += ["-k", args.k]
    env = {**os.environ, "CLIKA_FUZZ_SCALE": f"{scale:.3f}"}
    return subprocess.call(command, cwd=ROOT, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
