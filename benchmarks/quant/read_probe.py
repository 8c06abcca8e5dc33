"""This machine's memory read rate: ORT ReduceSum over 256 MiB of float32, larger than L3.

    python benchmarks/quant/read_probe.py --threads 2 --repeats 5     # prints JSON

What a decode step's weight reads can reach at best, measured the way a graph reads (ORT's
own intra-op threads, spinning off, as on a shared machine). ``kernel_gemv.py`` runs it
between its rounds, ``peers/run.py`` after each round of systems, so a run's GB/s stand
beside the bandwidth of the same minutes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

PROBE_FLOATS = 64 << 20  # 256 MiB


def probe_session(threads: int) -> ort.InferenceSession:
    node = helper.make_node("ReduceSum", ["X"], ["S"], keepdims=0)
    graph = helper.make_graph(
        [node],
        "probe",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [PROBE_FLOATS])],
        [helper.make_tensor_value_info("S", TensorProto.FLOAT, [])],
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def probe_input() -> dict[str, ort.OrtValue]:
    return {"X": ort.OrtValue.ortvalue_from_numpy(np.ones(PROBE_FLOATS, np.float32))}  # fed without a copy


def read_gbs(session: ort.InferenceSession, feeds: dict[str, ort.OrtValue]) -> float:
    """One pass over the probe's 256 MiB, in GB/s."""
    start = time.perf_counter()
    session.run(None, feeds)
    return PROBE_FLOATS * 4 / (time.perf_counter() - start) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    session, feeds = probe_session(args.threads), probe_input()
    read_gbs(session, feeds)  # the first pass faults the pages in
    rates = [read_gbs(session, feeds) for _ in range(args.repeats)]
    print(
        json.dumps({"best_gbs": max(rates), "median_gbs": statistics.median(rates), "threads": args.threads})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
