"""How long `/health` takes while clients send hostile grammars and schemas to `clika serve`.

Starts the real command (an ephemeral port), samples `/health` one request
after another while idle, then while ``--clients`` threads each send
``--rounds`` structured-output requests whose constraints are hard to compile
(a string ``pattern`` with nested quantifiers, ``^(a+)+(b+)+(c+)+(a|aa)*$``; a
regex format of the same; a 300-deep schema; a 20k-value enum), and prints the
latency percentiles of both phases, the statuses and the load average.

    python benchmarks/features/health_under_grammars.py [MODEL] [--clients 8] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from health_latency import load_average, sample_health, start_server, summary  # noqa: E402

CATASTROPHIC = "^(a+)+(b+)+(c+)+(a|aa)*$"


def _deep(depth: int) -> dict:
    schema: dict = {"type": "string", "pattern": CATASTROPHIC}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    return schema


def hostile_formats() -> list[dict]:
    def schema(value: dict) -> dict:
        return {"type": "json_schema", "json_schema": {"name": "hostile", "schema": value}}

    return [
        schema({"type": "object", "properties": {"s": {"type": "string", "pattern": CATASTROPHIC}}}),
        {"type": "regex", "pattern": CATASTROPHIC},
        schema(_deep(300)),
        schema({"type": "string", "enum": [f"value-{i}" for i in range(20_000)]}),
    ]


def send_hostile(url: str, rounds: int, statuses: Counter, seconds: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=600) as client:
        for index in range(rounds):
            fmt = hostile_formats()[index % 4]
            body = {"model": "m", "max_tokens": 8, "response_format": fmt}
            body["messages"] = [{"role": "user", "content": f"answer {index}"}]
            start = time.perf_counter()
            statuses[client.post("/v1/chat/completions", json=body).status_code] += 1
            seconds.append(time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="the server's ONNX Runtime threads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        process, url = start_server(args.model, args.threads, Path(tmp) / "serve.log")
        try:
            sample_health(url, None, 10)
            idle = sample_health(url, None, 100)
            load_before = load_average()
            statuses: Counter = Counter()
            seconds: list[float] = []
            stop = threading.Event()
            loaded: list[float] = []
            sampler = threading.Thread(target=lambda: loaded.extend(sample_health(url, stop)))
            senders = [
                threading.Thread(target=send_hostile, args=(url, args.rounds, statuses, seconds))
                for _ in range(args.clients)
            ]
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
    print(
        json.dumps(
            {
                "model": args.model,
                "clients": args.clients,
                "rounds": args.rounds,
                "statuses": dict(statuses),
                "request_s": {"median": round(statistics.median(seconds), 2), "max": round(max(seconds), 2)},
                "health_idle": summary(idle),
                "health_under_hostile_grammars": summary(loaded),
                "load_average_before": load_before,
                "load_average_after": load_average(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
