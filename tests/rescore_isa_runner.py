"""Runs HeadRescore cases in a process whose ISA CLIKA_KERNEL_ISA forces (argv: cases, out)."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

from rescore_cases import run_cases

from clika_runtime.kernels.library import kernel_status

if __name__ == "__main__":
    cases = pickle.loads(Path(sys.argv[1]).read_bytes())
    status = kernel_status()
    results = run_cases(cases) if status.available else []
    Path(sys.argv[2]).write_bytes(pickle.dumps({"status": status, "results": results}))
