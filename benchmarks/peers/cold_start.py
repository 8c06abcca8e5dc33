"""One-shot generation, process start to exit: `clika generate` against llama-cpp-python.

    python benchmarks/peers/cold_start.py --model qwen2.5-coder-1.5b-instruct --rounds 3
    python benchmarks/peers/cold_start.py --gguf path/to.gguf --clika-model path/to/folder

What a person running one command waits for: start the interpreter, load the model,
template and prefill the prompt, greedily decode --tokens tokens, exit. Each run is its own
process (its peak RSS its own, from the kernel's rusage); the systems alternate within
every round, so both see the same machine and the same warm page cache (the first round
warms it for both). Our side runs the `clika` script next to this interpreter on the model
folder (`--clika-model`, default: the cached export of the GGUF), the peer the same chat
prompt through llama-cpp-python's create_chat_completion in the peers' environment.
Prints each run, then the medians and their ratio (>1: clika faster / smaller).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

PROMPT = "Write a haiku about tea"
LLAMA_SCRIPT = """
import sys
from llama_cpp import Llama
model = Llama(sys.argv[1], n_threads=int(sys.argv[2]), n_ctx=4096, verbose=False)
reply = model.create_chat_completion(
    [{"role": "user", "content": sys.argv[3]}], max_tokens=int(sys.argv[4]), temperature=0
)
print(reply["choices"][0]["message"]["content"])
"""


def parse_args() -> argparse.Namespace:
    peers = Path(os.environ.get("CLIKA_PEERS_DIR", Path.home() / ".cache" / "clika-peers"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct", help="catalog name of the GGUF")
    ap.add_argument("--gguf", type=Path, help="the GGUF file (default: fetched by catalog name)")
    ap.add_argument("--clika-model", type=Path, help="model folder (default: the GGUF's cached export)")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers-python", type=Path, default=peers / "venv" / "bin" / "python")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    if args.gguf is None:
        from clika_export.pull.fetch import fetch_gguf

        args.gguf = fetch_gguf(args.model)
    if args.clika_model is None:
        from clika_export.api import cached_export

        args.clika_model = cached_export(args.gguf, "int4")
    clika = [str(Path(sys.executable).with_name("clika")), "generate", str(args.clika_model), PROMPT]
    clika += ["--max-tokens", str(args.tokens), "--temperature", "0", "--threads", str(args.threads)]
    llama = [
        str(args.peers_python),
        "-c",
        LLAMA_SCRIPT,
        str(args.gguf),
        str(args.threads),
        PROMPT,
        str(args.tokens),
    ]
    figures: dict[str, list[tuple[float, float]]] = {"clika": [], "llama-cpp-python": []}
    replies = {}
    for round_ in range(1, args.rounds + 1):
        order = list(figures) if round_ % 2 else list(reversed(figures))
        for system in order:
            wall, rss, replies[system] = measured(system, clika if system == "clika" else llama)
            figures[system].append((wall, rss))
            print(f"round {round_} {system:17s} {wall:6.2f} s  peak RSS {rss:7.0f} MiB", flush=True)
    medians = {
        s: (statistics.median(w for w, _ in f), statistics.median(r for _, r in f))
        for s, f in figures.items()
    }
    for system, (wall, rss) in medians.items():
        print(f"median {system:17s} {wall:6.2f} s  peak RSS {rss:7.0f} MiB")
    (ours_wall, ours_rss), (peer_wall, peer_rss) = medians["clika"], medians["llama-cpp-python"]
    print(
        f"clika vs llama-cpp-python: time {peer_wall / ours_wall:.2f}x, peak RSS {peer_rss / ours_rss:.2f}x"
    )
    print(f"same reply: {replies['clika'] == replies['llama-cpp-python']}")
    return 0


def measured(system: str, command: list[str]) -> tuple[float, float, str]:
    """One run in a fresh measuring process, so rusage's peak is this run's alone."""
    probe = (
        "import resource, subprocess, sys, time\n"
        "start = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - start\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "sys.stderr.write(done.stderr[-500:])\n"
        "print(f'{done.returncode} {wall} {peak}')\n"
        "print(done.stdout.strip())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *command], capture_output=True, text=True, check=False
    )
    status, wall, peak = done.stdout.split("\n", 1)[0].split()
    if status != "0":
        raise SystemExit(f"{system} failed ({status}): {done.stderr.strip()}")
    return float(wall), float(peak), done.stdout.split("\n", 1)[1].strip()


if __name__ == "__main__":
    raise SystemExit(main())
