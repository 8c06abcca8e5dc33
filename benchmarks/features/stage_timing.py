"""Timing one media stage graph: the onnxruntime session, the median of warm runs, the rows printed.

The vision and audio stage benchmarks (``vision.py``, ``qwen2_5_vl_vision.py``,
``audio.py``) time their graphs the same way, so their figures compare.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import onnxruntime as ort


def ort_session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def median_ms(run, rounds: int) -> float:
    run()  # warm-up: first-run allocations and kernel selection
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def print_rows(title: str, rows: list[dict]) -> None:
    """``title``, then each row as one JSON line (floats to 2 places)."""
    print(title)
    for row in rows:
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}))
