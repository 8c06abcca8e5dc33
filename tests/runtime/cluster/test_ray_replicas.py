"""Two engine replicas on a real local Ray cluster (127.0.0.1), against the single server.

One Ray cluster and one deployment for the whole module (they take seconds to start on
two cores): the real ``openai`` and ``ollama`` clients, the prefix-aware router's
placement, the merged /health and /metrics, a replica killed mid-stream, and a batch of
exports as Ray tasks. Skipped when Ray Serve is not installed (the ``cluster`` extra).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import httpx
import pytest

ray = pytest.importorskip(
    "ray", reason="the cluster tests need Ray Serve: pip install 'clika-runtime[cluster]'"
)
pytest.importorskip("ray.serve.request_router", reason="this Ray has no ray.serve.request_router API")

import ollama  # noqa: E402
import openai  # noqa: E402

from clika_runtime.cluster import deployment  # noqa: E402
from clika_runtime.cluster.local_ray import ray_cluster, serving  # noqa: E402
from clika_runtime.cluster.router import owner_name  # noqa: E402
from clika_runtime.server import start_server  # noqa: E402

MODEL = "tiny"
MESSAGES = [{"role": "user", "content": "hello there"}]
RESTART_WAIT_S = 180  # Ray brings a killed replica back within this (a bound, not a measurement)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tiny_llama_model):
    port = free_port()
    with ray_cluster(None, num_cpus=2):
        app = deployment(tiny_llama_model, replicas=2, threads=1, num_cpus=0.5, model_id=MODEL)
        with serving(app, port=port):
            yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def single(tiny_llama_model):
    with start_server(tiny_llama_model, model_id=MODEL) as running:
        yield running


@pytest.fixture(scope="module")
def http(cluster):
    with httpx.Client(base_url=cluster, timeout=120) as client:
        yield client


def replica_names(http) -> list[str]:
    return http.get("/replicas").json()["replicas"]


def session_owned_by(name: str, names: list[str]) -> str:
    """A session id the router sends to the replica ``name`` (its owner by rendezvous hashing)."""
    return next(s for s in (f"session-{i}" for i in range(1000)) if owner_name(f"session:{s}", names) == name)


def test_openai_and_ollama_replies_equal_a_single_servers(cluster, single):
    ours = openai.OpenAI(base_url=cluster + "/v1", api_key="none", max_retries=0, timeout=120)
    theirs = openai.OpenAI(base_url=single.url, api_key="none", max_retries=0, timeout=120)
    ask = dict(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0)
    expected = theirs.chat.completions.create(**ask).choices[0].message.content
    whole = ours.chat.completions.create(**ask).choices[0].message.content
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in ours.chat.completions.create(**ask, stream=True)
        if chunk.choices
    )
    assert whole == streamed == expected

    options = {"temperature": 0, "num_predict": 12}
    expected_ollama = ollama.Client(host=single.base_url).chat(
        model=MODEL, messages=MESSAGES, options=options
    )
    client = ollama.Client(host=cluster, timeout=120)
    reply = client.chat(model=MODEL, messages=MESSAGES, options=options)
    parts = [
        part.message.content
        for part in client.chat(model=MODEL, messages=MESSAGES, options=options, stream=True)
    ]
    assert reply.message.content == "".join(parts) == expected_ollama.message.content == expected


def test_both_replicas_serve_and_a_session_stays_on_its_replica(http):
    names = replica_names(http)
    assert len(names) == 2
    served: dict[str, list[str]] = {}
    for name in names:
        session = session_owned_by(name, names)
        for _ in range(10):
            response = http.post(
                "/v1/chat/completions",
                json={"model": MODEL, "messages": MESSAGES, "max_tokens": 2},
                headers={"x-session-id": session},
            )
            assert response.status_code == 200
            served.setdefault(name, []).append(response.headers["x-clika-replica"])
    assert served == {name: [name] * 10 for name in names}  # 10 of 10 on the owner, both owners served


def test_the_user_field_and_the_prefix_key_route_like_a_session(http):
    def replica(body: dict) -> str:
        response = http.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 2, **body})
        assert response.status_code == 200
        return response.headers["x-clika-replica"]

    assert len({replica({"messages": MESSAGES, "user": "alice"}) for _ in range(5)}) == 1
    first = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "name a color"}]
    later = [*first, {"role": "assistant", "content": "red"}, {"role": "user", "content": "another"}]
    assert replica({"messages": first}) == replica({"messages": later})  # one conversation, one replica


def test_health_and_metrics_per_replica_and_for_the_whole(http):
    names = replica_names(http)
    health = http.get("/health").json()
    assert health["status"] == "ok" and set(health["replicas"]) == set(names)
    assert all(load["status"] == "ok" for load in health["replicas"].values())
    merged = http.get("/metrics").text
    for name in names:
        assert f'replica="{name}"' in merged
        own = http.get(f"/replicas/{name}/metrics")
        assert own.status_code == 200 and own.headers["x-clika-replica"] == name
        assert "clika_http_requests_total" in own.text
    assert http.get("/replicas/nobody/metrics").status_code == 404


def test_a_replica_killed_mid_stream_ends_its_stream_with_an_error_then_others_answer(http):
    names = replica_names(http)
    pids = {name: load["pid"] for name, load in http.get("/health").json()["replicas"].items()}
    victim = names[0]
    body = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 100,
        "stream": True,
        "ignore_eos": True,
    }
    events = []
    with http.stream(
        "POST", "/v1/chat/completions", json=body, headers={"x-session-id": session_owned_by(victim, names)}
    ) as stream:
        assert stream.headers["x-clika-replica"] == victim
        lines = stream.iter_lines()
        events.append(next(line for line in lines if line.startswith("data: ")))
        os.kill(pids[victim], signal.SIGKILL)  # the replica's process dies with the stream open
        events.extend(line for line in lines if line.startswith("data: "))
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2].removeprefix("data: "))
    assert error["error"]["code"] == "replica_lost"

    for i in range(20):
        response = http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": f"next {i}"}], "max_tokens": 3},
        )
        assert response.status_code == 200, response.text

    deadline = time.monotonic() + RESTART_WAIT_S
    while len(live := replica_names(http)) < 2 or victim in live:
        assert time.monotonic() < deadline, f"Ray did not bring the replica back: {live}"
        time.sleep(1)
    assert http.get("/health").json()["status"] == "ok"


def test_an_export_batch_on_ray_equals_plain_exports(cluster, make_tiny_hf, tmp_path):
    from clika_export.api import export
    from clika_export.ray_batch import ExportOptions, export_batch

    sources = []
    for seed in range(3):
        make_tiny_hf(tmp_path / f"src{seed}", "llama", seed=seed)
        sources.append(tmp_path / f"src{seed}")
    lines: list[str] = []
    result = export_batch(sources, tmp_path / "batch", ExportOptions(precision="fp32"), report=lines.append)
    assert not result.failed and len(result.folders) == 3
    assert lines[-1].startswith("[3/3]") and "ETA" in lines[0]
    for source in sources:
        plain = export(source, tmp_path / "plain" / source.name, "fp32", progress=False)
        batch = result.folders[str(source)]
        weights = sorted(p.name for p in plain.iterdir() if p.suffix in (".onnx", ".data"))
        assert weights and weights == sorted(
            p.name for p in batch.iterdir() if p.suffix in (".onnx", ".data")
        )
        for name in weights:
            assert (plain / name).read_bytes() == (batch / name).read_bytes(), name
    again = export_batch(sources, tmp_path / "batch", ExportOptions(precision="fp32"))
    assert sorted(again.cached) == sorted(map(str, sources))  # the same bytes and options: not exported again


def test_a_failed_source_is_named_and_the_others_finish(cluster, make_tiny_hf, tmp_path):
    from clika_export.ray_batch import ExportOptions, export_batch

    good = tmp_path / "good"
    make_tiny_hf(good, "llama")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file")
    result = export_batch([good, broken], tmp_path / "out", ExportOptions(precision="fp32"))
    assert list(result.folders) == [str(good)] and list(result.failed) == [str(broken)]
    assert result.failed[str(broken)]
