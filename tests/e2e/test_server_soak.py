"""Soak: 1,000 requests against `clika serve` processes, one per KV mode, from clients that misbehave.

A tiny random llama (fp32, so a greedy reply is the same whatever it is
batched with) is served by the real command on 127.0.0.1, first with the
continuous KV cache, then with the paged one, 500 requests each from four
client threads: whole and streamed replies, streams the client drops after
its k-th chunk, requests whose client hangs up as soon as the body is sent,
and hostile bodies (lone surrogates, deep JSON, huge integers, oversize
bodies, wrong types, bad template arguments). Afterwards, on each server:
the engine's own integrity check holds (``clika_kv_integrity`` on
``/metrics``) with no request running and no KV block or slot held, its RSS
is within 10% of what it was after a warm-up, no request got a 5xx and its
log holds no traceback, and every reply the client read to its end equals
the reference reply of its prompt (computed once per prompt first, one
request at a time).

Nothing depends on thread timing: what each request does (its kind, prompt,
the chunk after which its client disconnects) comes from a seeded plan, and
each check holds whichever way the four clients' requests interleave.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

MODEL = "tiny"
CONTEXT = 256
PER_MODE = 500
WARM_UP = 60
CLIENTS = 4
BODY_CAP = 4 * 1024 * 1024  # the server's default

WORDS = "tea river cloud stone paper light music garden winter bread".split()
# Prompts share leading words, so the KV caches reuse and evict prefixes as they go.
PROMPTS = [f"tell me of {a} and {b}, {c}" for a in WORDS[:4] for b in WORDS[4:7] for c in WORDS[7:]]
KINDS = ("whole", "stream", "disconnect", "hang_up", "hostile")
WEIGHTS = (30, 25, 15, 10, 20)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _chat(content: object = "hello", **extra) -> bytes:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 2, **extra}
    return json.dumps(body).encode()


# (route, body, expected status)
HOSTILE = [
    ("/v1/chat/completions", _chat().replace(b"hello", b"a\\ud800b"), 400),
    ("/v1/chat/completions", _chat().replace(b'"content"', b'"\\udc00": 1, "content"'), 400),
    ("/v1/chat/completions", _chat(metadata="M").replace(b'"M"', _nested(1000).encode()), 400),
    ("/v1/chat/completions", b'{"model": "tiny", "messages": ' + _nested(100_000).encode() + b"}", 400),
    ("/v1/chat/completions", _chat().replace(b'"max_tokens": 2', b'"max_tokens": ' + b"9" * 5000), 400),
    ("/v1/chat/completions", _chat(max_tokens="5"), 400),
    ("/v1/chat/completions", _chat(temperature="hot"), 400),
    ("/v1/chat/completions", _chat(stop=[1]), 400),
    ("/v1/chat/completions", _chat(tools="x"), 400),
    ("/v1/chat/completions", json.dumps({"model": MODEL, "messages": "x"}).encode(), 400),
    ("/v1/chat/completions", _chat(content={"a": 1}), 400),
    ("/v1/chat/completions", _chat(chat_template_kwargs={"enable_thinking": "yes"}), 400),
    ("/v1/chat/completions", _chat(content="x" * (BODY_CAP + 1)), 413),
    ("/v1/chat/completions", b'{"model": "tiny", "messages": [', 400),
    ("/v1/chat/completions", b"\xff\xfe not json", 400),
    ("/v1/completions", b'{"model": "tiny", "prompt": "a\\udfffb", "max_tokens": 2}', 400),
    ("/v1/completions", b'{"model": "tiny", "prompt": ' + _nested(2000).encode() + b"}", 400),
    ("/api/chat", _chat(stream=False).replace(b"hello", b"a\\ud800b"), 400),
    ("/api/generate", json.dumps({"model": MODEL, "prompt": "hi", "options": {"num_predict": "x"}}).encode(), 400),
]  # fmt: skip


@dataclass(frozen=True)
class Step:
    kind: str
    prompt: int  # index into PROMPTS (or HOSTILE for kind "hostile")
    chunk: int = 0  # "disconnect": the client closes the stream after this many chunks


def plan(seed: int, count: int) -> list[Step]:
    rng = random.Random(seed)
    steps = []
    for kind in rng.choices(KINDS, WEIGHTS, k=count):
        pool = HOSTILE if kind == "hostile" else PROMPTS
        steps.append(Step(kind, rng.randrange(len(pool)), rng.randint(1, 4)))
    return steps


def max_tokens_of(prompt: int) -> int:
    return 3 + prompt % 6  # each prompt its own length, so replies end at many steps


@pytest.fixture(scope="module")
def model_folder(make_tiny_hf, tiny_zoo) -> Path:
    _, hf = tiny_zoo.checkpoint(make_tiny_hf, "llama", layers=2, max_position_embeddings=CONTEXT)
    return tiny_zoo.export(hf)


class Served:
    """`clika serve FOLDER --port 0` as a child process; its log goes to a file (a pipe would fill)."""

    def __init__(self, folder: Path, mode: str, log: Path) -> None:
        command = [sys.executable, "-m", "clika_cli.main", "serve", str(folder), "--port", "0"]
        command += ["--model-id", MODEL, "--kv-cache-mode", mode, "--threads", "1", "--max-active", "4"]
        self.log = log
        self._log_file = log.open("w")
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self._log_file)
        self.url = self._wait_for_address()
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def _wait_for_address(self) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for line in self.log.read_text().splitlines():
                if " at http://" in line:
                    return line.split(" at ")[1].split()[0].removesuffix("/").removesuffix("/v1")
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"clika serve did not report its address:\n{self.log.read_text()}")

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics", timeout=60).text
        return {
            s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels
        }

    def idle_metrics(self) -> dict[str, float]:
        """/metrics once every request has left the engine (dropped clients are noticed a step later)."""
        deadline = time.monotonic() + 120
        while True:
            samples = self.metrics()
            if samples["clika_requests_running"] == samples["clika_requests_waiting"] == 0:
                return samples
            assert time.monotonic() < deadline, f"requests still in the engine: {samples}"
            time.sleep(0.05)

    def statuses(self) -> Counter[str]:
        """Requests answered, by status (summed over routes and methods)."""
        text = httpx.get(self.url + "/metrics", timeout=60).text
        counts: Counter[str] = Counter()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "clika_http_requests_total":
                    counts[sample.labels["status"]] += int(sample.value)
        return counts

    def stop(self) -> None:
        self.process.send_signal(2)  # Ctrl-C: a graceful stop
        try:
            self.process.wait(timeout=60)
        finally:
            self.process.kill()
            self.process.wait()
            self._log_file.close()


class Client:
    """One client thread's connections: the openai library for replies, httpx for raw bodies."""

    def __init__(self, url: str, port: int) -> None:
        self.openai = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        self.http = httpx.Client(base_url=url, timeout=120)
        self.port = port

    def run(self, step: Step) -> tuple[str, str | None]:
        """Do ``step``; returns (outcome, reply text): "complete", "dropped", or "status NNN"."""
        if step.kind == "hostile":
            route, body, _ = HOSTILE[step.prompt]
            response = self.http.post(route, content=body, headers={"content-type": "application/json"})
            return f"status {response.status_code}", None
        request = dict(
            model=MODEL,
            messages=[{"role": "user", "content": PROMPTS[step.prompt]}],
            max_tokens=max_tokens_of(step.prompt),
            temperature=0,
        )
        if step.kind == "whole":
            reply = self.openai.chat.completions.create(**request)
            return "complete", reply.choices[0].message.content
        if step.kind == "hang_up":
            self._send_and_hang_up(request)
            return "dropped", None
        pieces = []
        with self.openai.chat.completions.create(**request, stream=True) as stream:
            for number, chunk in enumerate(stream, 1):
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                if step.kind == "disconnect" and number == step.chunk:
                    return "dropped", None  # leaving the block closes the connection mid-stream
        return "complete", "".join(pieces)

    def _send_and_hang_up(self, request: dict) -> None:
        """Send a whole non-streamed request, then close the socket without reading the answer."""
        body = json.dumps(request).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{self.port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as sock:
            sock.sendall(head + body)

    def close(self) -> None:
        self.openai.close()
        self.http.close()


def run_plan(served: Served, steps: list[Step]) -> list[tuple[str, str | None]]:
    clients = [Client(served.url, served.port) for _ in range(CLIENTS)]
    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            batches = [steps[i::CLIENTS] for i in range(CLIENTS)]
            done = list(
                pool.map(lambda pair: [pair[0].run(s) for s in pair[1]], zip(clients, batches, strict=True))
            )
    finally:
        for client in clients:
            client.close()
    outcomes: list = [None] * len(steps)
    for i, results in enumerate(done):
        outcomes[i::CLIENTS] = results
    return outcomes


def references(served: Served) -> list[str]:
    client = Client(served.url, served.port)
    try:
        return [client.run(Step("whole", p))[1] or "" for p in range(len(PROMPTS))]
    finally:
        client.close()


@pytest.fixture(scope="module")
def reference_replies(model_folder, tmp_path_factory) -> list[str]:
    served = Served(model_folder, "continuous", tmp_path_factory.mktemp("soak-ref") / "serve.log")
    try:
        return references(served)
    finally:
        served.stop()


@pytest.mark.parametrize("mode", ["continuous", "paged"])
def test_500_misbehaving_requests_leave_the_server_as_it_was(model_folder, reference_replies, mode, tmp_path):
    assert len(set(reference_replies)) > len(PROMPTS) // 2  # the prompts get different replies
    served = Served(model_folder, mode, tmp_path / "serve.log")
    try:
        seed = {"continuous": 1, "paged": 2}[mode]
        warm_steps, steps = plan(seed * 100, WARM_UP), plan(seed, PER_MODE)
        warm_outcomes = run_plan(served, warm_steps)
        served.idle_metrics()
        rss_start = served.rss_kib()
        outcomes = run_plan(served, steps)
        samples = served.idle_metrics()
        rss_end = served.rss_kib()
        statuses = served.statuses()
    finally:
        served.stop()
    log = served.log.read_text()

    assert samples["clika_kv_integrity"] == 1
    assert samples["clika_kv_slots_used"] == 0
    if mode == "paged":
        assert samples["clika_kv_blocks_used"] == 0
    assert rss_end <= rss_start * 1.10, f"RSS grew from {rss_start} KiB to {rss_end} KiB"
    assert not [s for s in statuses if s.startswith("5")], statuses
    hostile = sum(step.kind == "hostile" for step in warm_steps + steps)
    assert statuses["400"] + statuses["413"] == hostile  # every other request was answered 200
    assert "Traceback" not in log and '" 500' not in log

    kinds = dict.fromkeys(KINDS, 0)
    for step, (outcome, text) in zip(warm_steps + steps, warm_outcomes + outcomes, strict=True):
        kinds[step.kind] += 1
        if step.kind == "hostile":
            assert outcome == f"status {HOSTILE[step.prompt][2]}", (HOSTILE[step.prompt][:1], outcome)
        elif outcome == "complete":
            assert text == reference_replies[step.prompt], (step, text)
        else:
            assert outcome == "dropped" and step.kind in ("disconnect", "hang_up")
    assert min(kinds.values()) >= PER_MODE // 20  # every kind was exercised
