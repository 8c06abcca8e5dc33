"""Run the workloads W1-W4 on our runtime and the peers, side by side, and print the ratios.

    python benchmarks/peers/run.py                            # every system found, 3 rounds
    python benchmarks/peers/run.py --systems clika,llama-cpp-python --workloads W1 --rounds 1

Each system runs in its own process (so its peak RSS is its own), one process at
a time; in every round each system runs once, the order rotating from round to
round so that all systems see the same machine conditions. Every process loads
the model, warms up, then runs the workloads. The prompts (prompts.json) are
templated and tokenized once here with the model's own tokenizer (read from the
GGUF), so every system is fed the same token ids.

Output in RUN_DIR (under --out): records.jsonl (one JSON object a line),
meta.json (commit, versions, CPU, threads), summary.md (the tables), logs/.
Peers live in their own environment, set up by setup_peers.sh; a system that is
not installed is skipped, and the summary says why.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import report
import weight_bytes

BENCH_DIR = Path(__file__).resolve().parent
BENCHMARKS_DIR = BENCH_DIR.parent  # the workload prompts (prompts.json) every folder shares
REPO_DIR = BENCHMARKS_DIR.parent
DEFAULT_MODEL = "smollm2-135m-instruct"
ALL_SYSTEMS = ("clika", "llama-cpp-python", "onnxruntime-genai")
BASELINE = "clika-baseline"  # our runtime on --clika-baseline, a peer in the tables
# W3 last: its batch of 8 sets the process's peak memory, W1's figure is taken before it.
WORKLOAD_ORDER = ("W1", "W2", "W4", "W3")
W1_NEW, W3_NEW, W4_REPLY_CAP = 128, 128, 48
# Token texts that end generation whatever the GGUF's eos id says (llama.cpp's rule too).
# llama.cpp's threads are OpenMP threads: their idle waiting is set by the environment.
OPENMP_WAIT_POLICY = {
    "default": {},
    "off": {"OMP_WAIT_POLICY": "PASSIVE"},
    "on": {"OMP_WAIT_POLICY": "ACTIVE"},
}
END_OF_GENERATION_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")


def parse_args() -> argparse.Namespace:
    peers_dir = Path(os.environ.get("CLIKA_PEERS_DIR", Path.home() / ".cache" / "clika-peers"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--systems", default=",".join(ALL_SYSTEMS), help="comma list of " + ", ".join(ALL_SYSTEMS)
    )
    ap.add_argument("--workloads", default="W1,W2,W3,W4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=1, help="runs of each workload within a process")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up generations per process")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=DEFAULT_MODEL, help="catalog name of the GGUF")
    ap.add_argument("--gguf", type=Path, help="the GGUF file (default: fetched by catalog name)")
    ap.add_argument(
        "--clika-model",
        type=Path,
        default=os.environ.get("CLIKA_BENCH_MODEL"),
        help="exported model folder (default: exported from the GGUF into the cache)",
    )
    ap.add_argument("--clika-precision", default="int4", help="the export's precision when no --clika-model")
    ap.add_argument(
        "--clika-baseline",
        type=Path,
        help="a second model folder, run as the system clika-baseline (before/after in one run)",
    )
    ap.add_argument(
        "--peers-dir", type=Path, default=peers_dir, help="what setup_peers.sh made ($CLIKA_PEERS_DIR)"
    )
    ap.add_argument("--peers-python", type=Path, help="default: PEERS_DIR/venv/bin/python")
    ap.add_argument("--genai-model", type=Path, help="default: PEERS_DIR/models/genai-int4")
    ap.add_argument(
        "--llama-flash-attn",
        choices=["on", "off"],
        default="on",
        help="llama.cpp flash attention (on measured faster on 2 AVX2 cores)",
    )
    ap.add_argument(
        "--spin",
        choices=["off", "on", "default"],
        default="default",
        help="whether idle worker threads busy-wait: 'default' leaves each system its own "
        "setting (all three spin while they compute); 'off' / 'on' forces it for every system",
    )
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per process")
    a = ap.parse_args()
    a.systems = [s for s in a.systems.split(",") if s]
    unknown = sorted(set(a.systems) - set(ALL_SYSTEMS))
    if unknown:
        ap.error(f"unknown system(s) {unknown}; known: {', '.join(ALL_SYSTEMS)}")
    if a.clika_baseline:
        a.systems.append(BASELINE)
    a.workloads = [w for w in WORKLOAD_ORDER if w in a.workloads.split(",")]
    if not a.workloads:
        ap.error("no known workload named; known: W1, W2, W3, W4")
    a.peers_python = a.peers_python or a.peers_dir / "venv" / "bin" / "python"
    a.genai_model = a.genai_model or a.peers_dir / "models" / "genai-int4"
    return a


# -- the prompts, tokenized once ------------------------------------------------


def save_gguf_tokenizer(gguf: Path, folder: Path):
    """The GGUF's own tokenizer and chat template as tokenizer.json + chat_template.jinja."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tok.chat_template:
        sys.exit(f"{gguf.name} has no chat template; the workloads are chat prompts")
    tok.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(tok.chat_template)
    return tok


def eos_ids(tok) -> list[int]:
    ids = {tok.eos_token_id}
    vocab = tok.get_vocab()
    ids.update(vocab[t] for t in END_OF_GENERATION_TEXTS if t in vocab)
    return sorted(i for i in ids if i is not None)


def build_spec(args, gguf: Path, run_dir: Path) -> dict:
    """Token ids of every prompt, checked against transformers' own chat templating."""
    from harness import ChatTemplate

    tok_dir = run_dir / "tokenizer"
    tok = save_gguf_tokenizer(gguf, tok_dir)
    template = ChatTemplate(tok_dir)
    prompts = json.loads((BENCHMARKS_DIR / "prompts.json").read_text())

    def request(text: str) -> dict:
        messages = [{"role": "user", "content": text}]
        ids = template.ids(messages)
        reference = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        reference = (
            reference["input_ids"] if isinstance(reference, dict) or hasattr(reference, "keys") else reference
        )
        if list(reference) != ids:
            sys.exit("the light chat template disagrees with transformers' apply_chat_template")
        return {"messages": messages, "ids": ids}

    return {
        "threads": args.threads,
        "spin": args.spin,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "workloads": args.workloads,
        "tokenizer_dir": str(tok_dir),
        "eos_ids": eos_ids(tok),
        "warmup_prompt": request(prompts["warmup"]),
        "w1": {**request(prompts["w1"]), "new_tokens": W1_NEW},
        "w2": {**request(prompts["w2"]), "new_tokens": 1},
        "w3": {"requests": [request(p) for p in prompts["w3"]], "new_tokens": W3_NEW},
        "w4": {"user_turns": prompts["w4"], "reply_cap": W4_REPLY_CAP},
    }


# -- which systems can run ----------------------------------------------------


def python_can_import(python: Path, module: str) -> str | None:
    """None if ``python`` imports ``module``, else why not."""
    if not Path(python).exists():
        return f"no interpreter at {python} (run benchmarks/peers/setup_peers.sh)"
    done = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, text=True)
    if done.returncode:
        return f"{python} cannot import {module}: {done.stderr.strip().splitlines()[-1]}"
    return None


def model_folder(path: Path) -> tuple[Path | None, str | None]:
    folder = Path(path)
    if not (folder / "manifest.json").is_file():
        return None, f"{folder} is not a model folder (no manifest.json)"
    return folder, None


def clika_model_dir(args, gguf: Path) -> tuple[Path | None, str | None]:
    """The exported model folder: the one given, or the GGUF exported once into the cache."""
    if args.clika_model:
        return model_folder(args.clika_model)
    try:
        from clika_export.api import cached_export

        return cached_export(gguf, precision=args.clika_precision), None
    except Exception as e:  # the summary says why ours did not run
        return None, f"could not export {gguf.name} at {args.clika_precision}: {type(e).__name__}: {e}"


def plan_systems(args, gguf: Path) -> tuple[dict, dict]:
    """{system: how to run it} for the systems that can run, and {system: why not} for the rest."""
    plans, skipped = {}, {}
    for name in args.systems:
        if name in ("clika", BASELINE):
            why = python_can_import(Path(sys.executable), "clika_runtime.modelverse")
            folder = None
            if why is None and name == BASELINE:
                folder, why = model_folder(args.clika_baseline)
            elif why is None:
                folder, why = clika_model_dir(args, gguf)
            if why is None:
                plans[name] = {
                    "python": sys.executable,
                    "worker": "worker_clika.py",
                    "system": {"model_dir": str(folder)},
                    "weight_bytes": weight_bytes.onnx_bytes_per_token(weight_bytes.clika_graph_file(folder)),
                }
        elif name == "llama-cpp-python":
            why = python_can_import(args.peers_python, "llama_cpp")
            if why is None:
                plans[name] = {
                    "python": str(args.peers_python),
                    "worker": "worker_llamacpp.py",
                    "system": {"gguf": str(gguf), "flash_attn": args.llama_flash_attn == "on"},
                    "weight_bytes": weight_bytes.gguf_bytes_per_token(gguf),
                    "env": OPENMP_WAIT_POLICY[args.spin],
                }
        elif name == "onnxruntime-genai":
            why = python_can_import(args.peers_python, "onnxruntime_genai")
            config = args.genai_model / "genai_config.json"
            if why is None and not config.is_file():
                why = f"no genai model at {args.genai_model} (run benchmarks/peers/setup_peers.sh)"
            if why is None:
                graph = json.loads(config.read_text())["model"]["decoder"]["filename"]
                plans[name] = {
                    "python": str(args.peers_python),
                    "worker": "worker_ortgenai.py",
                    "system": {"model_dir": str(args.genai_model)},
                    "weight_bytes": weight_bytes.onnx_bytes_per_token(args.genai_model / graph),
                }
        if why is not None:
            skipped[name] = why
            print(f"skipping {name}: {why}", flush=True)
    return plans, skipped


# -- the rounds ------------------------------------------------------------------


def run_process(name: str, plan: dict, spec: dict, round_no: int, run_dir: Path, timeout: int) -> list[dict]:
    """One system, one process, one round; returns its records (weight figures added to W1)."""
    tag = f"{name}-r{round_no}"
    spec_path = run_dir / "specs" / f"{tag}.json"
    raw_path = run_dir / "raw" / f"{tag}.jsonl"
    spec_path.write_text(json.dumps({**spec, "round": round_no, "system": plan["system"]}))
    raw_path.unlink(missing_ok=True)
    cmd = [plan["python"], str(BENCH_DIR / plan["worker"]), str(spec_path), str(raw_path)]
    env = {**os.environ, **plan.get("env", {})}
    with open(run_dir / "logs" / f"{tag}.log", "w") as log:
        try:
            rc = subprocess.run(
                cmd, cwd=BENCH_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    records = [json.loads(line) for line in raw_path.read_text().splitlines()] if raw_path.exists() else []
    for r in records:
        r["system"] = name  # the worker knows its runtime, not which of our two folders it ran
    if rc != 0 and not any(r["workload"] == "error" for r in records):
        records.append(
            {
                "system": name,
                "round": round_no,
                "workload": "error",
                "error": f"process ended with {rc}; see logs/{tag}.log",
            }
        )
    for r in records:
        if r["workload"] == "W1":
            r["weight_mib_per_token"] = plan["weight_bytes"] / 2**20
            r["weight_gb_s"] = plan["weight_bytes"] * r["decode_tok_s"] / 1e9
    return records


def one_line(name: str, records: list[dict]) -> str:
    parts = []
    for r in records:
        w = r["workload"]
        if w == "W1":
            parts.append(f"W1 {r['ttft_ms']:.0f} ms / {r['decode_tok_s']:.1f} tok/s")
        elif w == "W2":
            parts.append(f"W2 {r['prefill_tok_s']:.0f} tok/s")
        elif w == "W3":
            parts.append(f"W3 {r['agg_tok_s']:.1f} tok/s")
        elif w == "W4":
            parts.append(f"W4 {r['ttft_turn5_ms']:.0f} ms")
        elif w == "process":
            parts.append(f"RSS {r['peak_rss_mib']:.0f} MiB")
        elif w == "error":
            parts.append(f"ERROR {r['error']}")
    return f"{name:18s} " + ", ".join(parts)


# -- what the run ran on -------------------------------------------------------


def read_probe(threads: int) -> dict:
    """This machine's memory read rate now, from its own process (quant/read_probe.py)."""
    script = BENCHMARKS_DIR / "quant" / "read_probe.py"
    done = subprocess.run(
        [sys.executable, str(script), "--threads", str(threads)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def cpu_info() -> dict:
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile")
    return {
        "model": model,
        "logical_cpus": os.cpu_count(),
        "flags": " ".join(f for f in wanted if f in flags),
    }


def git_commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO_DIR, capture_output=True, text=True)
        return done.stdout.strip()

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return commit + (" (with local changes)" if git("status", "--porcelain", "--untracked-files=no") else "")


def main() -> int:
    args = parse_args()
    if args.gguf is None:
        from clika_export.pull.fetch import fetch_gguf

        args.gguf = fetch_gguf(args.model)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    run_dir = args.out / run_id
    for sub in ("specs", "raw", "logs"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    spec = build_spec(args, Path(args.gguf), run_dir)
    plans, skipped = plan_systems(args, Path(args.gguf))
    names = list(plans)
    meta = {
        "run_id": run_id,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu_info(),
        "threads": args.threads,
        "spin": args.spin,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "workloads": args.workloads,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "model": Path(args.gguf).name,
        "prompt_tokens": {
            "W1": len(spec["w1"]["ids"]),
            "W2": len(spec["w2"]["ids"]),
            "W3": [len(r["ids"]) for r in spec["w3"]["requests"]],
        },
        "eos_ids": spec["eos_ids"],
        "load_average_start": os.getloadavg(),
        "read_probe": [],  # the memory read rate after each round (quant/read_probe.py)
        "systems_run": names,
        "skipped": skipped,
    }
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2))
    print(f"run {run_id}: {', '.join(names) or 'no system'}; prompts {meta['prompt_tokens']}", flush=True)
    records_path = run_dir / "records.jsonl"
    for round_no in range(1, args.rounds + 1):
        shift = (round_no - 1) % max(len(names), 1)
        for name in names[shift:] + names[:shift]:
            records = run_process(name, plans[name], spec, round_no, run_dir, args.timeout)
            with open(records_path, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
            load = os.getloadavg()[0]
            print(f"round {round_no} " + one_line(name, records) + f" [load {load:.1f}]", flush=True)
        meta["read_probe"].append(read_probe(args.threads))
    # Other processes on the machine bend every figure: say how busy it was.
    meta["load_average_end"] = os.getloadavg()
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2))
    records = report.load_records(run_dir) if records_path.exists() else []
    summary = report.markdown(meta, records)
    (run_dir / "summary.md").write_text(summary)
    print("\n" + summary)
    print(f"records: {records_path}\nsummary: {run_dir / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
