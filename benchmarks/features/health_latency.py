"""How long `/health` takes while 8 clients send 3.9 MB request bodies to `clika serve`.

Starts the real command on 127.0.0.1 (an ephemeral port), samples `/health`
one request after another while idle, then again while ``--clients`` threads
each post a chat request whose message is ``--body-bytes`` long,
``--rounds`` times back to back, and prints the latency percentiles of both
phases, what the big requests were answered and the machine's load average
(the figure means little without it).

    python benchmarks/features/health_latency.py [MODEL] [--clients 8] [--body-bytes 3900000] [--rounds 3]

A model whose tokenizer has no normalizer refuses such a body by its length
before tokenizing (SmolLM2, Qwen); one with a normalizer (gemma-3-270m)
tokenizes it, on a worker thread, a few at a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

IDLE_SAMPLES = 100


def start_server(model: str, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "clika_cli.main", "serve", model, "--port", "0", "--model-id", "m"]
    command += ["--threads", str(threads)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    deadline = time.monotonic() + 600  # a first run may pull and export the model
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if " at http://" in line:
                return process, line.split(" at ")[1].split()[0].removesuffix("/").removesuffix("/v1")
        if process.poll() is not None:
            break
        time.sleep(0.1)
    process.kill()
    raise SystemExit(f"clika serve did not start:\n{log.read_text()}")


def sample_health(url: str, stop: threading.Event | None, count: int = 0) -> list[float]:
    """Latencies (s) of GET /health sent one after another: ``count`` of them, or until ``stop``."""
    latencies = []
    with httpx.Client(base_url=url, timeout=120) as client:
        while (stop is None and len(latencies) < count) or (stop is not None and not stop.is_set()):
            start = time.perf_counter()
            client.get("/health").raise_for_status()
            latencies.append(time.perf_counter() - start)
    return latencies


def send_bodies(url: str, body: bytes, rounds: int, statuses: Counter, seconds: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=600) as client:
        for _ in range(rounds):
            start = time.perf_counter()
            response = client.post(
                "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
            )
            seconds.append(time.perf_counter() - start)
            statuses[response.status_code] += 1


def summary(latencies: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies)
    return {
        "samples": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
        "max_ms": round(ms[-1], 1),
    }


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--body-bytes", type=int, default=3_900_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="the server's ONNX Runtime threads")
    args = parser.parse_args()
    text = ("lorem ipsum dolor sit amet " * (args.body_bytes // 27 + 1))[: args.body_bytes - 100]
    body = json.dumps({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": text}]})

    with tempfile.TemporaryDirectory() as tmp:
        process, url = start_server(args.model, args.threads, Path(tmp) / "serve.log")
        try:
            sample_health(url, None, 10)  # warm the connection and the handler
            idle = sample_health(url, None, IDLE_SAMPLES)
            load_before = load_average()
            statuses: Counter = Counter()
            seconds: list[float] = []
            senders = [
                threading.Thread(
                    target=send_bodies, args=(url, body.encode(), args.rounds, statuses, seconds)
                )
                for _ in range(args.clients)
            ]
            stop = threading.Event()
            loaded: list[float] = []
            sampler = threading.Thread(target=lambda: loaded.extend(sample_health(url, stop)))
            sampler.start()
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join()
            stop.set()
            sampler.join()
        finally:
            process.send_signal(2)
            process.wait(timeout=60)
    report = {
        "model": args.model,
        "body_bytes": len(body),
        "clients": args.clients,
        "rounds": args.rounds,
        "big_request_statuses": dict(statuses),
        "big_request_s": {"median": round(statistics.median(seconds), 2), "max": round(max(seconds), 2)},
        "health_idle": summary(idle),
        "health_under_load": summary(loaded),
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
