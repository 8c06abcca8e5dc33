"""What every system's worker process shares: the workload drivers and the records.

A worker is one system in one process (so its peak RSS is its own). run.py
starts it as ``python worker_<system>.py SPEC.json RECORDS.jsonl``; the spec
holds the token ids of every prompt, made once by run.py with the model's own
tokenizer, so every system is fed the same ids. The worker appends one JSON
object a line to RECORDS.jsonl.

This module imports only the standard library, jinja2 and tokenizers: it runs
in the peers' environment as well as in the project's, and must not inflate a
system's memory with heavy imports.

A system adapter implements:

* ``load(spec)``: load the model (timed);
* ``stream(prompt, max_new, ignore_eos)``: yield lists of new token ids as the
  caller receives them (greedy; ``ignore_eos`` masks the end-of-sequence ids);
* ``batch(prompts, max_new)``: all prompts submitted at once, EOS masked;
  returns a ``BatchResult``;
* ``chat_turn(messages, ids, reply_cap)``: one turn of a conversation whose
  earlier turns the system may keep in its KV cache; returns a ``TurnResult``;
* ``cold_start()``: untimed, before every W1/W2/W3 request: leave no KV that the
  next prompt could reuse (W1-W3 measure prompts computed from scratch; W4 is
  where reuse counts);
* ``cached_tokens()``: prompt tokens the last ``stream`` call reused (0 when none);
* ``versions()``: the versions and settings worth recording.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Prompt:
    """One request: the conversation (for text APIs) and its templated token ids."""

    messages: list[dict[str, str]]
    ids: list[int]


@dataclass
class BatchResult:
    """What a system reports about a batch of requests run together."""

    new_tokens: int
    latencies_s: list[float] | None  # per request, from the common start; None if not observable
    first_token_s: list[float] | None = None
    mode: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class TurnResult:
    """One chat turn: when its first token reached the caller and how much KV it reused."""

    first_token_time: float  # time.perf_counter() value
    reply_text: str
    reply_tokens: int
    reused_tokens: int | None  # prompt tokens served from a kept KV cache; None if not reported
    extra: dict = field(default_factory=dict)


class ChatTemplate:
    """The model's chat template and tokenizer (tokenizer.json + chat_template.jinja), light to import."""

    def __init__(self, folder: str | Path) -> None:
        import jinja2.sandbox
        from tokenizers import Tokenizer

        folder = Path(folder)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # The settings transformers renders chat templates with, so the text is the same.
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self.template = env.from_string((folder / "chat_template.jinja").read_text())

    def text(self, messages: list[dict[str, str]]) -> str:
        return self.template.render(messages=messages, add_generation_prompt=True)

    def ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self.tokenizer.encode(self.text(messages), add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB.

    VmHWM, not getrusage's ru_maxrss: ru_maxrss survives fork + exec, so a worker
    started by a big parent would report the parent's peak.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmHWM in /proc/self/status (peak RSS needs Linux)")


def common_prefix(a, b) -> int:
    """How many leading items two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def percentile(values: list[float], pct: float) -> float:
    """Linear-interpolated percentile (the numpy default), without numpy."""
    xs = sorted(values)
    k = (len(xs) - 1) * pct / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Records:
    """Appends one JSON object a line; every record names the system, round and workload."""

    def __init__(self, path: str | Path, system: str, round_no: int) -> None:
        self.path = Path(path)
        self.base = {"system": system, "round": round_no}

    def add(self, workload: str, **fields) -> None:
        record = {**self.base, "workload": workload, "time": time.time(), **fields}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def timed_stream(
    system, prompt: Prompt, max_new: int, ignore_eos: bool
) -> tuple[float, list[float], list[int]]:
    """Run one streamed request; returns (start, arrival time of each token, token ids)."""
    times: list[float] = []
    tokens: list[int] = []
    system.cold_start()
    start = time.perf_counter()
    for chunk in system.stream(prompt, max_new, ignore_eos):
        now = time.perf_counter()
        times.extend([now] * len(chunk))
        tokens.extend(chunk)
    return start, times, tokens


def run_w1(system, spec: dict) -> dict:
    """One stream, fixed length: TTFT and decode rate = (n - 1) / (last - first)."""
    w = spec["w1"]
    start, times, tokens = timed_stream(system, Prompt(w["messages"], w["ids"]), w["new_tokens"], True)
    if len(tokens) != w["new_tokens"]:
        raise RuntimeError(f"W1 produced {len(tokens)} tokens, expected {w['new_tokens']} (EOS not masked?)")
    return {
        "prompt_tokens": len(w["ids"]),
        "new_tokens": len(tokens),
        "ttft_ms": (times[0] - start) * 1e3,
        "decode_tok_s": (len(tokens) - 1) / (times[-1] - times[0]),
        "total_s": times[-1] - start,
        "cached_tokens": system.cached_tokens(),
        "tokens": tokens,
    }


def run_w2(system, spec: dict) -> dict:
    """Prefill: one token after a long prompt; prefill rate = prompt tokens / TTFT."""
    w = spec["w2"]
    start, times, tokens = timed_stream(system, Prompt(w["messages"], w["ids"]), 1, True)
    ttft = times[0] - start
    return {
        "prompt_tokens": len(w["ids"]),
        "ttft_ms": ttft * 1e3,
        "prefill_tok_s": len(w["ids"]) / ttft,
        "cached_tokens": system.cached_tokens(),
    }


def run_w3(system, spec: dict) -> dict:
    """Concurrency: every request submitted at once; aggregate rate and latency percentiles."""
    w = spec["w3"]
    prompts = [Prompt(r["messages"], r["ids"]) for r in w["requests"]]
    system.cold_start()
    start = time.perf_counter()
    result = system.batch(prompts, w["new_tokens"])
    wall = time.perf_counter() - start
    expected = w["new_tokens"] * len(prompts)
    if result.new_tokens != expected:
        raise RuntimeError(f"W3 produced {result.new_tokens} tokens, expected {expected}")
    out = {
        "requests": len(prompts),
        "new_tokens": result.new_tokens,
        "wall_s": wall,
        "agg_tok_s": result.new_tokens / wall,
        "mode": result.mode,
        **result.extra,
    }
    if result.latencies_s:
        out["lat_p50_s"] = percentile(result.latencies_s, 50)
        out["lat_p95_s"] = percentile(result.latencies_s, 95)
    if result.first_token_s:
        out["ttft_p50_ms"] = percentile(result.first_token_s, 50) * 1e3
    return out


def run_w4(system, spec: dict, template: ChatTemplate) -> dict:
    """Multi-turn chat: the whole conversation re-templated each turn, replies capped."""
    w = spec["w4"]
    messages: list[dict[str, str]] = []
    turns = []
    system.cold_start()
    for user in w["user_turns"]:
        messages.append({"role": "user", "content": user})
        ids = template.ids(messages)
        start = time.perf_counter()
        turn = system.chat_turn(list(messages), ids, w["reply_cap"])
        messages.append({"role": "assistant", "content": turn.reply_text})
        prefilled = None if turn.reused_tokens is None else len(ids) - turn.reused_tokens
        turns.append(
            {
                "prompt_tokens": len(ids),
                "reused_tokens": turn.reused_tokens,
                "prefilled_tokens": prefilled,
                "ttft_ms": (turn.first_token_time - start) * 1e3,
                "reply_tokens": turn.reply_tokens,
                **turn.extra,
            }
        )
    last = turns[-1]
    return {
        "ttft_turn5_ms": last["ttft_ms"],
        "prompt_tokens_turn5": last["prompt_tokens"],
        "prefilled_turn5": last["prefilled_tokens"],
        "turns": turns,
        "last_reply": messages[-1]["content"],
    }


RUNNERS = {"W1": run_w1, "W2": run_w2, "W3": run_w3}


def worker_main(system_name: str, system) -> int:
    """The whole life of one worker process: load, warm up, run the workloads, record."""
    spec_path, records_path = Path(sys.argv[1]), Path(sys.argv[2])
    spec = json.loads(spec_path.read_text())
    records = Records(records_path, system_name, spec["round"])
    try:
        start = time.perf_counter()
        system.load(spec)
        load_s = time.perf_counter() - start
        warm = spec["warmup_prompt"]
        for _ in range(spec["warmup"]):
            timed_stream(system, Prompt(warm["messages"], warm["ids"]), 16, True)
        template = ChatTemplate(spec["tokenizer_dir"])
        for workload in spec["workloads"]:
            for repeat in range(spec["repeats"]):
                if workload == "W4":
                    figures = run_w4(system, spec, template)
                else:
                    figures = RUNNERS[workload](system, spec)
                records.add(workload, repeat=repeat, peak_rss_mib=peak_rss_mib(), **figures)
        records.add("process", load_s=load_s, peak_rss_mib=peak_rss_mib(), versions=system.versions())
    except Exception as e:  # record why, so the table can say it
        records.add("error", error=f"{type(e).__name__}: {e}", peak_rss_mib=peak_rss_mib())
        raise
    return 0
