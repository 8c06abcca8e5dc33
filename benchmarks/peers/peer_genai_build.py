"""Build the onnxruntime-genai CPU model (int4 by default) from a Hugging Face folder.

    python peer_genai_build.py HF_DIR OUT_DIR [--precision int4|int8]

Uses the builder's defaults for the CPU target (symmetric round-to-nearest,
block 32, int8 activations in MatMulNBits; the tied embedding shares the
quantized head), which is what a user of the builder gets. Thread count and
end-of-sequence ids are set when the benchmark loads the model, not here.
Runs in the peers' environment (onnxruntime-genai, onnx, onnx-ir, torch, transformers).
"""

import argparse
import subprocess
import sys
from collections import Counter
from pathlib import Path

import onnx


def build(hf_dir: Path, out: Path, precision: str) -> None:
    cache = out.parent / f".{out.name}-cache"
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder"]
    cmd += ["-i", str(hf_dir), "-o", str(out), "-p", precision, "-e", "cpu", "-c", str(cache)]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def summarize(out: Path) -> str:
    """What the built graph computes with: op counts and the attention op's settings."""
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    lines = [
        "ops: " + ", ".join(f"{op} x{n}" for op, n in Counter(n.op_type for n in graph.node).most_common())
    ]
    for op in ("GroupQueryAttention", "MatMulNBits"):
        node = next((n for n in graph.node if n.op_type == op), None)
        if node is not None:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            lines.append(f"{op}: {attrs}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--precision", default="int4", choices=["int4", "int8"])
    a = ap.parse_args()
    build(a.hf_dir, a.out, a.precision)
    summary = summarize(a.out)
    (a.out / "graph_summary.txt").write_text(summary + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
