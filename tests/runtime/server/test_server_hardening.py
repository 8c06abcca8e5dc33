"""The server against hostile clients, on the tiny model: bounded work, 4xx never 5xx, streams ended, not cut.

Real servers on 127.0.0.1 and real sockets. Where a check needs work to be
in flight (tokenizations, a decode, a probe render), the test holds that
work at a gate it controls and releases it afterwards, so nothing depends on
how fast a thread runs.
"""

from __future__ import annotations

import json
import logging
import socket
import threading

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route
from starlette.testclient import TestClient

from clika_runtime.server import start_server
from clika_runtime.server.boundary import ErrorBoundary
from clika_runtime.server.json_input import MAX_DEPTH
from clika_runtime.server.prompt_bound import MAX_TOKENIZING

MODEL = "tiny"
BIG_BODY = 3_900_000  # under the default 4 MB cap


@pytest.fixture(scope="module")
def server(tiny_model):
    with start_server(tiny_model, model_id=MODEL, max_active=4) as running:
        yield running


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client


def chat_body(content: str = "hello", **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 4, **extra}


def post_raw(http: httpx.Client, path: str, raw: bytes) -> httpx.Response:
    return http.post(path, content=raw, headers={"content-type": "application/json"})


def openai_error(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])
    return body["error"]


class Gate:
    """Wraps a callable: every call announces itself, then waits until the test opens the gate."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.opened = threading.Event()
        self.entered = threading.Semaphore(0)
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.entered.release()
        assert self.opened.wait(60), "the test never opened the gate"
        return self.inner(*args, **kwargs)

    def wait_entered(self, count: int) -> None:
        for _ in range(count):
            assert self.entered.acquire(timeout=60), "the gated work never started"


# -- no client input gives a 500 --------------------------------------------------------------


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


HOSTILE_CHAT_BODIES = {
    "lone surrogate": b'{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "a\\ud800b"}]}',
    "surrogate in a key": b'{"model": "tiny", "messages": [{"role": "user", "content": "x", "\\udc00": 1}]}',
    "nested 1000 deep": (
        '{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "metadata": ' + _nested(1000) + "}"
    ).encode(),
    "nested 100000 deep": ('{"model": "tiny", "messages": ' + _nested(100_000) + "}").encode(),
    "integer of 5000 digits": b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": '
    + b"9" * 5000
    + b"}",
    "nested tool-call arguments": json.dumps(
        {
            "model": MODEL,
            "max_tokens": 2,
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": _nested(1000)},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "y"},
            ],
        }
    ).encode(),
    "huge integer in tool-call arguments": json.dumps(
        {
            "model": MODEL,
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "1" * 5000}}
                    ],
                },
            ],
        }
    ).encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_CHAT_BODIES))
def test_hostile_json_is_a_400_in_openais_shape_with_no_traceback(http, name, caplog):
    with caplog.at_level(logging.INFO):
        response = post_raw(http, "/v1/chat/completions", HOSTILE_CHAT_BODIES[name])
    assert response.status_code == 400, response.text
    error = openai_error(response)
    assert error["type"] == "invalid_request_error"
    words = {"surrogate": "surrogate", "nested": f"deeper than {MAX_DEPTH}", "integer": "digits"}
    assert next(w for k, w in words.items() if k in name) in error["message"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_hostile_completion_prompts_are_400s(http):
    surrogate = post_raw(
        http, "/v1/completions", b'{"model": "tiny", "prompt": "a\\udfffb", "max_tokens": 2}'
    )
    assert surrogate.status_code == 400 and "surrogate" in openai_error(surrogate)["message"]
    deep = post_raw(http, "/v1/completions", ('{"model": "tiny", "prompt": ' + _nested(2000) + "}").encode())
    assert deep.status_code == 400 and "deeper" in openai_error(deep)["message"]


def test_a_server_fault_is_one_log_line_and_a_500_naming_its_id(caplog):
    async def broken(request):
        raise ZeroDivisionError("a fault of the server's own")

    app = Starlette(
        routes=[Route("/v1/x", broken), Route("/api/x", broken)], middleware=[Middleware(ErrorBoundary)]
    )
    with TestClient(app, raise_server_exceptions=False) as client, caplog.at_level(logging.INFO):
        response = client.get("/v1/x")
        ollama = client.get("/api/x")
    ident = response.headers["x-error-id"]
    assert response.status_code == 500 and ident in openai_error(response)["message"]
    assert ollama.status_code == 500 and set(ollama.json()) == {"error"}
    assert ollama.headers["x-error-id"] in ollama.json()["error"]
    lines = [r for r in caplog.records if r.name == "clika_runtime.server"]
    assert len(lines) == 2 and ident in lines[0].getMessage() and "ZeroDivisionError" in lines[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]


# -- bounded work before admission -------------------------------------------------------------


def test_a_prompt_too_long_by_its_bytes_alone_is_refused_without_tokenizing(server, http):
    tokenizer = server.backend.model.tokenizer
    counted = Gate(tokenizer.encode)
    counted.opened.set()
    tokenizer.encode = counted
    try:
        bodies = [json.dumps(chat_body("x" * BIG_BODY)).encode() for _ in range(8)]
        results: list[httpx.Response] = [None] * len(bodies)  # type: ignore[list-item]

        def send(index: int) -> None:
            with httpx.Client(base_url=server.base_url, timeout=120) as client:
                results[index] = post_raw(client, "/v1/chat/completions", bodies[index])

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
        for thread in threads:
            thread.start()
        assert http.get("/health").status_code == 200
        for thread in threads:
            thread.join()
    finally:
        del tokenizer.encode
    for response in results:
        assert response.status_code == 400 and openai_error(response)["code"] == "context_length_exceeded"
        assert "at least" in openai_error(response)["message"]
    assert counted.calls == 0  # refused by length before any tokenizer work


def test_health_is_served_while_tokenizations_are_in_flight(server, http):
    tokenizer = server.backend.model.tokenizer
    gate = Gate(tokenizer.encode)
    tokenizer.encode = gate
    results: list[httpx.Response | None] = [None] * 8
    try:

        def send(index: int) -> None:
            with httpx.Client(base_url=server.base_url, timeout=120) as client:
                results[index] = client.post("/v1/chat/completions", json=chat_body(f"hello {index}"))

        threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        gate.wait_entered(MAX_TOKENIZING)  # that many are tokenizing now; the others wait their turn
        health = http.get("/health")
        models = http.get("/v1/models")
        assert gate.calls == MAX_TOKENIZING  # still held: /health was answered during the tokenizations
    finally:
        gate.opened.set()
        for thread in threads:
            thread.join()
        del tokenizer.encode
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert models.status_code == 200 and models.json()["data"][0]["id"] == MODEL
    assert [r.status_code for r in results] == [200] * 8


def test_models_probe_the_template_off_the_event_loop(tiny_model):
    template = tiny_model.chat_template
    template.__dict__.pop("reasoning", None)  # the card reads reasoning_mode, which probes once
    gate = Gate(template._probe)
    template._probe = gate
    try:
        with start_server(tiny_model, model_id=MODEL) as running:
            holder: list[httpx.Response] = []
            asking = threading.Thread(
                target=lambda: holder.append(httpx.get(running.url + "/models", timeout=60))
            )
            asking.start()
            gate.wait_entered(1)  # the probe is rendering (held) ...
            health = httpx.get(running.base_url + "/health", timeout=60)  # ... and the loop still answers
            gate.opened.set()
            asking.join()
    finally:
        gate.opened.set()
        del template._probe
    assert health.status_code == 200
    assert holder[0].status_code == 200 and holder[0].json()["data"][0]["supports_tools"] is False


# -- incomplete requests time out -------------------------------------------------------------


@pytest.fixture(scope="module")
def impatient(tiny_model):
    with start_server(tiny_model, model_id=MODEL, read_timeout=0.5) as running:
        yield running


def _connect(running) -> socket.socket:
    sock = socket.create_connection((running.host, running.port), timeout=30)
    return sock


def test_a_request_whose_headers_stall_is_closed(impatient):
    with _connect(impatient) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        assert sock.recv(1024) == b""  # the server closed the connection
    with _connect(impatient) as sock:  # a connection that sends nothing at all
        assert sock.recv(1024) == b""
    assert httpx.get(impatient.base_url + "/health").status_code == 200


def test_a_body_that_stalls_is_a_408(impatient):
    with _connect(impatient) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model": '
        )
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body)["error"]["code"] == "request_timeout"


# -- shutdown ends every stream ---------------------------------------------------------------


class EngineBrake:
    """An engine observer that holds the engine thread at its next step until released."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self, event) -> None:
        if event.stage == "step" and not self.release.is_set():
            self.held.set()
            self.release.wait(60)


def test_shutdown_ends_every_open_stream_with_its_protocols_farewell(tiny_llama_model):
    from clika_runtime import modelverse

    model = modelverse.load(tiny_llama_model, threads=1)
    running = start_server(model, model_id=MODEL, max_active=8)
    brake = EngineBrake()
    # The brake holds the engine after its first step, which only the first request takes part in
    # (the others are sent once it holds); that one ignores end-of-sequence ids, so no reply can
    # end on its own before the stop.
    long = {"max_tokens": 50, "ignore_eos": True}
    opened = []
    try:
        engine = running.backend.engine
        engine.observer = brake
        submitted = Gate(engine.submit)  # counts the requests that reach the engine
        submitted.opened.set()
        engine.submit = submitted
        client = openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=60)
        chat = client.chat.completions.create(
            **chat_body(max_tokens=50), extra_body={"ignore_eos": True}, stream=True
        )
        first = next(iter(chat))  # the chat stream is open (its first chunk arrived)
        assert first.choices[0].delta.role == "assistant"
        assert brake.held.wait(60)  # the engine is held after its first step: nothing can finish now
        streams = {
            "completion": ("/v1/completions", {"model": MODEL, "prompt": "hi", "stream": True, **long}),
            "responses": (
                "/v1/responses",
                {"model": MODEL, "input": "hi", "stream": True, "max_output_tokens": 50},
            ),
            "ollama": ("/api/chat", {"model": MODEL, "messages": HELLO_TURN, "options": {"num_predict": 50}}),
        }
        lines = {}
        for name, (path, body) in streams.items():
            context = httpx.stream("POST", running.base_url + path, json=body, timeout=60)
            opened.append(context)
            lines[name] = context.__enter__().iter_lines()  # the headers arrived: the stream is open
        whole: list[httpx.Response] = []
        waiting = threading.Thread(
            target=lambda: whole.append(
                httpx.post(running.url + "/chat/completions", json=chat_body(**long), timeout=60)
            )
        )
        waiting.start()
        submitted.wait_entered(5)  # all five requests reached the engine
        stopping = threading.Thread(target=running.stop)
        stopping.start()
        with pytest.raises(openai.APIError) as ended:
            for _ in chat:
                pass
        assert "shutting down" in str(ended.value)
        read = {name: [line for line in stream if line] for name, stream in lines.items()}
        waiting.join(60)
    finally:
        brake.release.set()
        for context in opened:
            context.__exit__(None, None, None)
        running.stop()
        model.close()
    stopping.join(60)
    assert not stopping.is_alive()
    completion = read["completion"]
    assert completion[-1] == "data: [DONE]"
    assert json.loads(completion[-2].removeprefix("data: "))["error"]["code"] == "server_shutting_down"
    responses = read["responses"]
    assert responses[-2] == "event: error"
    assert json.loads(responses[-1].removeprefix("data: "))["code"] == "server_shutting_down"
    assert "shutting down" in json.loads(read["ollama"][-1])["error"]
    assert whole[0].status_code == 503 and openai_error(whole[0])["code"] == "server_shutting_down"


HELLO_TURN = [{"role": "user", "content": "hello"}]


# -- CORS, metrics, the access log --------------------------------------------------------------


def test_cors_preflight_from_an_allowed_origin_only(tiny_model):
    with start_server(
        tiny_model, model_id=MODEL, cors_origins=["http://app.example"], api_key="k"
    ) as running:
        preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
        preflight["Access-Control-Request-Headers"] = "authorization, content-type"
        allowed = httpx.options(running.url + "/chat/completions", headers=preflight)
        other = httpx.options(
            running.url + "/chat/completions", headers={**preflight, "Origin": "http://evil.example"}
        )
        reply = httpx.post(
            running.url + "/chat/completions",
            json=chat_body(max_tokens=1),
            headers={"Origin": "http://app.example", "Authorization": "Bearer k"},
            timeout=60,
        )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "http://app.example"
    assert "POST" in allowed.headers["access-control-allow-methods"]
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    assert reply.status_code == 200 and reply.headers["access-control-allow-origin"] == "http://app.example"


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.parametrize("kv_mode", ["continuous", "paged"])
def test_metrics_count_requests_and_tokens_and_read_the_engine(tiny_llama_model, kv_mode):
    from clika_runtime import modelverse

    model = modelverse.load(tiny_llama_model, threads=1, kv_cache_mode=kv_mode)
    with start_server(model, model_id=MODEL) as running:
        client = openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=60)
        whole = client.chat.completions.create(**chat_body(max_tokens=5))
        streamed = list(
            client.chat.completions.create(
                **chat_body(max_tokens=3), stream=True, stream_options={"include_usage": True}
            )
        )
        httpx.get(running.base_url + "/no/such/route")
        metrics = httpx.get(running.base_url + "/metrics")
        steps = running.backend.engine.stats.steps
    model.close()
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    samples = _samples(metrics.text)
    route = (("method", "POST"), ("route", "/v1/chat/completions"), ("status", "200"))
    assert samples[("clika_http_requests_total", route)] == 2
    assert (
        samples[("clika_http_requests_total", (("method", "GET"), ("route", "other"), ("status", "404")))]
        == 1
    )
    usage = streamed[-1].usage
    assert samples[("clika_prompt_tokens_total", ())] == whole.usage.prompt_tokens + usage.prompt_tokens
    assert samples[("clika_completion_tokens_total", ())] == 5 + 3
    assert samples[("clika_requests_running", ())] == 0 and samples[("clika_requests_waiting", ())] == 0
    assert samples[("clika_engine_steps_total", ())] == steps > 0
    assert samples[("clika_engine_step_seconds_total", ())] > 0
    assert samples[("clika_kv_integrity", ())] == 1  # checked on the engine's thread at the scrape
    if kv_mode == "paged":
        assert samples[("clika_kv_blocks", ())] > 0 and samples[("clika_kv_blocks_used", ())] == 0
        assert samples[("clika_kv_blocks_cached", ())] > 0  # the replies' blocks stay for prefix reuse
    else:
        assert samples[("clika_kv_slots_used", ())] == 0 and samples[("clika_kv_cache_bytes", ())] > 0


def test_metrics_report_drifted_kv_bookkeeping_as_0_and_log_it(tiny_llama_model, caplog):
    from clika_runtime import modelverse

    model = modelverse.load(tiny_llama_model, threads=1)
    with start_server(model, model_id=MODEL) as running:
        cache = running.backend.engine.cache
        cache._free.append(cache._free[0])  # a slot free twice: what a lost release would leave
        with caplog.at_level(logging.ERROR, logger="clika_runtime.server"):
            drifted = _samples(httpx.get(running.base_url + "/metrics").text)
        cache._free.pop()
        healed = _samples(httpx.get(running.base_url + "/metrics").text)
    model.close()
    assert drifted[("clika_kv_integrity", ())] == 0 and healed[("clika_kv_integrity", ())] == 1
    assert [r.getMessage() for r in caplog.records] == ["KV bookkeeping drifted: a slot is free twice"]


def test_replies_are_sent_without_waiting_for_the_clients_ack(tiny_model):
    # Its own server: the module's would log this request's line into the next test's capture.
    with start_server(tiny_model, model_id=MODEL) as running:
        with httpx.Client(base_url=running.base_url, timeout=60) as client:
            assert client.get("/health").status_code == 200  # the connection stays open (keep-alive)
            connections = list(running._server.server_state.connections)
            sockets = [c.transport.get_extra_info("socket") for c in connections]
            delays = [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in sockets]
    assert connections and all(delays), delays


def test_one_access_log_line_per_request(server, http, caplog):
    with caplog.at_level(logging.INFO, logger="clika_runtime.server.access"):
        http.get("/health")
        http.post("/v1/chat/completions", json=chat_body(max_tokens=1))
        http.post("/v1/chat/completions", json=chat_body(max_tokens=1, stream=True))
        http.get("/v1/nothing")
    lines = [r.getMessage() for r in caplog.records if r.name == "clika_runtime.server.access"]
    assert len(lines) == 4
    assert '"GET /health" 200' in lines[0] and '"POST /v1/chat/completions" 200' in lines[1]
    assert '"POST /v1/chat/completions" 200' in lines[2] and '"GET /v1/nothing" 404' in lines[3]


# -- echo ------------------------------------------------------------------------------------


def test_echo_puts_the_prompt_before_the_reply(server, tiny_model):
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60)
    plain = client.completions.create(model=MODEL, prompt="hello world", max_tokens=5, temperature=0)
    echoed = client.completions.create(
        model=MODEL, prompt="hello world", max_tokens=5, temperature=0, echo=True
    )
    assert echoed.choices[0].text == "hello world" + plain.choices[0].text
    ids = tiny_model.tokenizer.encode("hi there")
    by_ids = client.completions.create(model=MODEL, prompt=ids, max_tokens=2, temperature=0, echo=True)
    assert by_ids.choices[0].text.startswith(tiny_model.tokenizer.decode(ids))
    chunks = list(
        client.completions.create(
            model=MODEL, prompt="hello world", max_tokens=5, temperature=0, echo=True, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks) == echoed.choices[0].text


# -- a hostile chat template --------------------------------------------------------------------

LOOPING_TEMPLATE = (
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    "{% for m in messages %}{{ m['content'] }}{% endfor %}"
)


def test_a_looping_template_is_cut_off_and_the_server_keeps_serving(tiny_llama_model, tmp_path):
    import shutil

    from clika_runtime import modelverse

    folder = tmp_path / "looping"
    shutil.copytree(tiny_llama_model, folder)
    (folder / "chat_template.jinja").write_text(LOOPING_TEMPLATE)
    model = modelverse.load(folder, threads=1)  # its probes are cut at the first limit
    try:
        with (
            start_server(model, model_id=MODEL) as running,
            httpx.Client(base_url=running.base_url, timeout=120) as http,
        ):
            for _ in range(2):  # the second render runs in a fresh render process
                refused = http.post("/v1/chat/completions", json=chat_body())
                assert refused.status_code == 400 and "longer than" in openai_error(refused)["message"]
            assert http.get("/health").json()["status"] == "ok"
            assert http.get("/v1/models").json()["data"][0]["id"] == MODEL
            raw = http.post("/v1/completions", json={"model": MODEL, "prompt": "hello", "max_tokens": 3})
            assert raw.status_code == 200 and raw.json()["usage"]["completion_tokens"] == 3
    finally:
        model.close()


# -- malformed fields across every front end ----------------------------------------------------

ODD_VALUES = [
    None, True, -1, 1.5, 10**30, "", "a\ud800", [], [1], {}, {"a": 1}, [{}], [{"role": "user"}],
    [{"role": "user", "content": None}], [{"role": "user", "content": [{"type": "text"}]}],
    [{"role": "assistant", "tool_calls": "x"}], [{"role": "assistant", "tool_calls": [{"function": "f"}]}],
    [{"role": "tool", "content": "x"}], [{"type": "function_call"}], {"num_predict": "x", "stop": [1]},
    {"temperature": "hot", "seed": -5}, [{"type": "function", "function": {"name": ""}}],
]  # fmt: skip
FIELDS = {
    "/v1/chat/completions": (
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        [
            "messages",
            "tools",
            "tool_choice",
            "stop",
            "max_tokens",
            "temperature",
            "seed",
            "stream_options",
            "n",
        ],
    ),
    "/v1/completions": (
        {"model": MODEL, "prompt": "hi", "max_tokens": 2},
        ["prompt", "max_tokens", "echo", "stop"],
    ),
    "/v1/responses": (
        {"model": MODEL, "input": "hi", "max_output_tokens": 2},
        ["input", "instructions", "tools", "tool_choice", "text", "reasoning"],
    ),
    "/api/chat": (
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "options": {"num_predict": 2},
            "stream": False,
        },
        ["messages", "options", "tools", "think", "format"],
    ),
    "/api/generate": (
        {"model": MODEL, "prompt": "hi", "options": {"num_predict": 2}, "stream": False},
        ["prompt", "system", "raw", "options", "context"],
    ),
}


def test_no_malformed_field_gives_a_5xx_on_any_front_end(http):
    answered = 0
    for path, (base, names) in FIELDS.items():
        for name in names:
            for value in ODD_VALUES:
                response = post_raw(http, path, json.dumps({**base, name: value}).encode())
                assert response.status_code < 500, (path, name, value, response.text)
                if response.status_code >= 400:
                    assert set(response.json()) == {"error"}  # the front end's own error shape
                answered += 1
    assert answered == sum(len(names) for _, names in FIELDS.values()) * len(ODD_VALUES)
