"""Replicas on Ray Serve: the cost Ray adds per request, 1 vs 2 replicas, and the prefix router's hits.

One local Ray cluster on 127.0.0.1 for the run. Three measurements:

1. Ray's overhead: the same sequential one-token requests to a single ``clika serve`` and to a
   one-replica deployment, alternating rounds; the difference of their medians is what the
   front deployment, the proxy and the handle add per request, in ms.
2. Throughput: ``--requests`` chat requests, ``--concurrency`` at a time, to 1 and to 2 replicas
   (``--threads`` each): requests/s, p50 and p99 latency. On a 2-core machine two replicas share
   the cores one replica already uses, so expect no gain; the figure shows what it costs.
3. Routing: 8 conversations x 5 turns on 2 replicas, each turn adding the last reply and a new
   question, with the prefix-aware router and with Ray Serve's default (power of two choices).
   A hit is a turn served by the replica that served the conversation's previous turn (its KV
   is there); also the median time to the first streamed token of turn 5.

    python benchmarks/features/cluster.py [MODEL] [--threads 1] [--requests 24] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from clika_runtime import modelverse
from clika_runtime.cluster import deployment
from clika_runtime.cluster.local_ray import ray_cluster, serving
from clika_runtime.server import start_server
from clika_runtime.store import resolve

MODEL_ID = "bench"
QUESTIONS = ["Name a fruit.", "And its color?", "Where does it grow?", "How is it eaten?", "One more fact?"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chat(client: httpx.Client, messages: list[dict], max_tokens: int) -> tuple[float, str, str]:
    began = time.perf_counter()
    response = client.post(
        "/v1/chat/completions",
        json={"model": MODEL_ID, "messages": messages, "max_tokens": max_tokens, "temperature": 0},
    )
    response.raise_for_status()
    reply = response.json()["choices"][0]["message"]["content"]
    return time.perf_counter() - began, reply, response.headers.get("x-clika-replica", "")


def overhead_ms(single: str, ray_url: str, rounds: int = 5, per_round: int = 10) -> tuple[float, float]:
    timings: dict[str, list[float]] = {single: [], ray_url: []}
    messages = [{"role": "user", "content": "Say hi."}]
    with httpx.Client(base_url=single, timeout=300) as a, httpx.Client(base_url=ray_url, timeout=300) as b:
        for client in (a, b):
            chat(client, messages, 1)  # warm
        for _ in range(rounds):
            for url, client in ((single, a), (ray_url, b)):
                timings[url] += [chat(client, messages, 1)[0] for _ in range(per_round)]
    return statistics.median(timings[single]) * 1e3, statistics.median(timings[ray_url]) * 1e3


def throughput(url: str, requests: int, concurrency: int, max_tokens: int) -> tuple[float, float, float]:
    with httpx.Client(base_url=url, timeout=600, limits=httpx.Limits(max_connections=concurrency)) as client:
        chat(client, [{"role": "user", "content": "warm up"}], 2)

        def one(i: int) -> float:
            return chat(client, [{"role": "user", "content": f"Tell me about the number {i}."}], max_tokens)[
                0
            ]

        began = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            latencies = sorted(pool.map(one, range(requests)))
        wall = time.perf_counter() - began
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return requests / wall, statistics.median(latencies) * 1e3, p99 * 1e3


def first_token_s(
    client: httpx.Client, messages: list[dict], max_tokens: int
) -> tuple[float, str, str, dict]:
    """(time to the first token, the reply, the replica, the usage) of one streamed turn."""
    body = {
        "model": MODEL_ID,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    began, first, parts, usage = time.perf_counter(), None, [], {}
    with client.stream("POST", "/v1/chat/completions", json=body) as stream:
        replica = stream.headers.get("x-clika-replica", "")
        for line in stream.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            usage = event.get("usage") or usage
            choices = event.get("choices") or [{}]
            text = choices[0].get("delta", {}).get("content")
            if text:
                first = first or time.perf_counter() - began
                parts.append(text)
    return first or time.perf_counter() - began, "".join(parts), replica, usage


def conversations(url: str, max_tokens: int, count: int = 8) -> tuple[float, float, float]:
    """(same-replica rate over turns 2-5, cached share of prompt tokens, median turn-5 TTFT in ms)."""
    hits, turns, last_ttft, prompt, cached = 0, 0, [], 0, 0
    with httpx.Client(base_url=url, timeout=600) as client:
        histories = [
            [{"role": "system", "content": f"You are assistant number {c}, an expert in topic {c}."}]
            for c in range(count)
        ]
        owners: list[str | None] = [None] * count
        for turn, question in enumerate(QUESTIONS):
            for c, history in enumerate(histories):
                history.append({"role": "user", "content": question})
                ttft, reply, replica, usage = first_token_s(client, history, max_tokens)
                prompt += usage["prompt_tokens"]
                cached += usage["prompt_tokens_details"]["cached_tokens"]
                history.append({"role": "assistant", "content": reply})
                if turn > 0:
                    turns += 1
                    hits += replica == owners[c]
                if turn == len(QUESTIONS) - 1:
                    last_ttft.append(ttft)
                owners[c] = replica
    return hits / turns, cached / prompt, statistics.median(last_ttft) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of each router")
    parser.add_argument("--routing-only", action="store_true", help="only the router comparison")
    args = parser.parse_args()
    folder = resolve(args.model, None, pull=True, say=print).folder
    print(f"load: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} CPUs")
    with ray_cluster(None, num_cpus=os.cpu_count()):

        def app(replicas: int, router: str = "prefix"):
            return deployment(folder, replicas=replicas, threads=args.threads, num_cpus=0.5,
                              model_id=MODEL_ID, router=router)  # fmt: skip

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        rows = []
        if not args.routing_only:
            model = modelverse.load(folder, threads=args.threads)
            with start_server(model, model_id=MODEL_ID) as single:
                with serving(app(1), port=port):
                    direct, via_ray = overhead_ms(single.base_url, url)
                    one = throughput(url, args.requests, args.concurrency, args.max_tokens)
            print(
                f"one-token request: direct {direct:.1f} ms, via Ray Serve {via_ray:.1f} ms, overhead {via_ray - direct:.1f} ms"
            )
            rows.append(("1 replica", one))
            with serving(app(2), port=port):
                rows.append(("2 replicas", throughput(url, args.requests, args.concurrency, args.max_tokens)))
        runs: dict[str, list[tuple[float, float, float]]] = {"prefix": [], "default": []}
        for _ in range(args.rounds):  # alternating, so the machine's load falls on both alike
            for router in runs:
                with serving(app(2, router), port=port):
                    runs[router].append(conversations(url, args.max_tokens))
        prefix, default = (tuple(map(statistics.median, zip(*runs[r], strict=True))) for r in runs)
    print(
        f"\n| {args.model}, {args.threads} thread(s) per replica | req/s | p50 ms | p99 ms |\n|---|---:|---:|---:|"
    )
    for name, (rate, p50, p99) in rows:  # none with --routing-only
        print(f"| {name} | {rate:.2f} | {p50:.0f} | {p99:.0f} |")
    print(
        "\n| router, 8 conversations x 5 turns, 2 replicas | same-replica turns | cached prompt tokens "
        "| turn-5 TTFT ms |\n|---|---:|---:|---:|"
    )
    for name, (same, cached, ttft) in (("prefix-aware", prefix), ("Ray Serve default", default)):
        print(f"| {name} | {same:.0%} | {cached:.0%} | {ttft:.0f} |")


if __name__ == "__main__":
    main()
