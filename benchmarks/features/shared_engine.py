"""Eight chat sessions on one model: the KV cache they hold, and decode speed, across code trees.

Each code tree (this checkout, or another checkout of the project named with
``--tree NAME=DIR``) runs in its own process, the trees alternating round by
round, on the same model folder:

* ``sessions``: 8 ``chat_session()`` conversations (a different system turn
  each), 5 user turns each (``prompts.json``'s W4 turns, ~500 tokens of
  conversation per session), greedy replies capped at 48 tokens, the sessions
  taking turns. Figures: the KV cache bytes held by every distinct engine the
  sessions ran on (one shared engine, or one per session), the prompt tokens
  computed (not reused from a prefix cache), wall time, and a hash of all 40
  replies (equal hashes: the same replies).
* ``decode``: W1's single stream (133-token prompt, 128 new tokens, end of
  sequence masked) through ``stream_generate``: the report's decode tok/s.

    python benchmarks/features/shared_engine.py --tree main=../main --rounds 3
    python benchmarks/features/shared_engine.py --kv-cache-mode paged --max-active 8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
BENCHMARKS_DIR = BENCH_DIR.parent  # the workload prompts (prompts.json) every folder shares
REPO_DIR = BENCHMARKS_DIR.parent
PACKAGES = ("runtime", "export", "quant", "cli")
SESSIONS = 8
REPLY_TOKENS = 48


def model_folder(precision: str) -> Path:
    """SmolLM2-135M-Instruct (the GGUF the tests fetch, sha256-checked) exported at ``precision``, cached."""
    from clika_export.api import cached_export
    from clika_export.pull.fetch import fetch_gguf

    return cached_export(fetch_gguf("smollm2-135m-instruct", progress=False), precision, progress=False)


def held_kv_bytes(engines: dict[int, object]) -> int:
    return sum(engine.cache.usage()["kv_cache_bytes"] for engine in engines.values())  # type: ignore[attr-defined]


def run_sessions(folder: str, kv_mode: str, max_active: int, threads: int) -> dict:
    """The ``sessions`` workload in this process (the tree on ``sys.path``)."""
    from clika_runtime import modelverse

    turns = json.loads((BENCHMARKS_DIR / "prompts.json").read_text(encoding="utf-8"))["w4"]
    model = modelverse.load(folder, threads=threads, kv_cache_mode=kv_mode)
    sessions = [
        model.chat_session(system=f"You are assistant number {i}. Answer briefly.", max_active=max_active)
        for i in range(SESSIONS)
    ]
    replies, computed, conversation_tokens = [], 0, [0] * SESSIONS
    began = time.perf_counter()
    for turn in turns:
        for i, session in enumerate(sessions):
            replies.append(session.send(turn, temperature=0.0, max_new_tokens=REPLY_TOKENS))
            report = session.report
            computed += report.prompt_tokens - report.cached_tokens
            conversation_tokens[i] = report.prompt_tokens + report.completion_tokens
    wall = time.perf_counter() - began
    engines = {id(s.engine): s.engine for s in sessions}
    figures = {
        "engines": len(engines),
        "kv_cache_bytes": held_kv_bytes(engines),
        "prompt_tokens_computed": computed,
        "conversation_tokens_mean": statistics.mean(conversation_tokens),
        "wall_s": wall,
        "replies_sha256": hashlib.sha256("\x00".join(replies).encode()).hexdigest()[:16],
    }
    for s in sessions:
        s.close()
    model.close()
    return figures


def run_decode(folder: str, threads: int) -> dict:
    """The ``decode`` workload (W1) in this process."""
    from clika_runtime import modelverse

    prompt = json.loads((BENCHMARKS_DIR / "prompts.json").read_text(encoding="utf-8"))["w1"]
    model = modelverse.load(folder, threads=threads)
    model.generate("Hello!", max_new_tokens=8)  # warm-up
    reply = model.stream_generate(prompt, temperature=0.0, max_new_tokens=128, ignore_eos=True)
    text = "".join(reply)
    report = model.report
    model.close()
    return {
        "decode_tok_s": report.decode_tokens_per_s,
        "completion_tokens": report.completion_tokens,
        "reply_sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
    }


def child(args: argparse.Namespace) -> None:
    if args.workload == "sessions":
        figures = run_sessions(args.folder, args.kv_cache_mode, args.max_active, args.threads)
    else:
        figures = run_decode(args.folder, args.threads)
    print(json.dumps(figures))


def run_tree(tree: Path, args: argparse.Namespace, workload: str, folder: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(tree / p) for p in PACKAGES))
    command = [
        sys.executable,
        __file__,
        "--child",
        workload,
        "--folder",
        str(folder),
        "--kv-cache-mode",
        args.kv_cache_mode,
        "--max-active",
        str(args.max_active),
        "--threads",
        str(args.threads),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree} failed on {workload}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def commit_of(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], help="NAME=DIR: another checkout to compare")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", default="int4")
    ap.add_argument("--kv-cache-mode", default="continuous", choices=("continuous", "paged"))
    ap.add_argument("--max-active", type=int, default=1, help="each chat_session()'s max_active")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workloads", default="sessions,decode")
    ap.add_argument("--child", choices=("sessions", "decode"), help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.workload = args.child
        child(args)
        return
    trees = {"this": REPO_DIR, **{n: Path(d).resolve() for n, d in (t.split("=", 1) for t in args.tree)}}
    folder = model_folder(args.precision)
    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        names = list(trees)[r % len(trees) :] + list(trees)[: r % len(trees)]  # the order rotates
        for workload in args.workloads.split(","):
            for name in names:
                figures = run_tree(trees[name], args, workload, folder)
                results.setdefault((name, workload), []).append(figures)
                print(f"round {r + 1} {name} {workload}: {json.dumps(figures)}", flush=True)
    print(
        f"\nSmolLM2-135M-Instruct {args.precision}, {args.kv_cache_mode} KV cache, {args.threads} threads, ",
        end="",
    )
    print(f"{args.rounds} rounds, sessions at max_active={args.max_active}; medians")
    print(
        "| tree | commit | engines | KV bytes held | prompt tokens computed | sessions wall s | replies | W1 decode tok/s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, tree in trees.items():
        sessions = results.get((name, "sessions"), [])
        decode = results.get((name, "decode"), [])

        def med(rows: list[dict], key: str) -> str:
            return f"{statistics.median(row[key] for row in rows):,.1f}" if rows else "-"

        hashes = ",".join(sorted({row["replies_sha256"] for row in sessions})) or "-"
        engines = sessions[0]["engines"] if sessions else "-"
        print(
            f"| {name} | {commit_of(tree)} | {engines} | {med(sessions, 'kv_cache_bytes')} | "
            f"{med(sessions, 'prompt_tokens_computed')} | {med(sessions, 'wall_s')} | {hashes} | "
            f"{med(decode, 'decode_tok_s')} |"
        )


if __name__ == "__main__":
    main()
