"""The OpenAI-compatible server on the real Qwen2.5-Coder-0.5B-Instruct, through the real ``openai`` client.

One server per module (127.0.0.1, an ephemeral port), one engine shared by
every request: chat whole and streamed, tool calls whole and streamed, eight
concurrent streams, a client that leaves mid-stream, and a full queue.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from clika_export.api import cached_export
from clika_runtime import modelverse
from clika_runtime.server import start_server

pytestmark = pytest.mark.slow

PRECISION = "int4"  # the smallest precision the export builds
MODEL = "qwen2.5-coder-0.5b-instruct"
CAPITALS = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Italy": "Rome",
    "Germany": "Berlin",
    "Spain": "Madrid",
    "Egypt": "Cairo",
    "Russia": "Moscow",
    "Greece": "Athens",
}


@pytest.fixture(scope="module")
def model(qwen05_gguf):
    loaded = modelverse.load(cached_export(qwen05_gguf, PRECISION, progress=False))
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def server(model):
    with start_server(model, model_id=MODEL, max_active=8) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def ask(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def wait_idle(server, seconds: float = 10.0) -> float:
    """Seconds until the engine has no request running or waiting (AssertionError past ``seconds``)."""
    began = time.monotonic()
    while server.backend.load() != {"active": 0, "waiting": 0}:
        assert time.monotonic() - began < seconds, f"the engine still holds requests: {server.backend.load()}"
        time.sleep(0.02)
    return time.monotonic() - began


def test_chat_whole_and_streamed_give_the_same_answer(client):
    question = ask("What is the capital of France? Answer in one short sentence.")
    whole = client.chat.completions.create(model=MODEL, messages=question, max_tokens=32, temperature=0)
    answer = whole.choices[0].message.content
    assert "Paris" in answer and whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens > 1 and whole.usage.total_tokens == (
        whole.usage.prompt_tokens + whole.usage.completion_tokens
    )
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=question,
            max_tokens=32,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # really streamed
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_tool_call_whole_then_the_result_answered(client, weather_tool):
    question = ask("What is the weather like in Paris right now?")
    reply = client.chat.completions.create(
        model=MODEL, messages=question, tools=[weather_tool], temperature=0, max_tokens=64
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    # The call and its result go back as OpenAI history (arguments a JSON string, content null).
    history = [
        {
            "role": "system",
            "content": "When a tool result arrives, answer the question with it in one sentence.",
        },
        *question,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees Celsius, light rain"},
    ]
    answer = client.chat.completions.create(model=MODEL, messages=history, temperature=0, max_tokens=64)
    assert answer.choices[0].finish_reason == "stop" and "18" in answer.choices[0].message.content


def test_tool_call_streamed_in_openais_delta_shape(client, weather_tool):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=ask("Is it raining in Rome today?"),
        tools=[weather_tool],
        temperature=0,
        max_tokens=64,
        stream=True,
    )
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        delta = chunk.choices[0].delta
        for part in delta.tool_calls or ():
            call = calls.setdefault(part.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = part.id or call["id"]
            if part.function is not None:
                call["name"] += part.function.name or ""
                call["arguments"] += part.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and list(calls) == [0]
    assert calls[0]["id"].startswith("call_") and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "Rome"}


def test_a_required_tool_call_is_made_even_to_small_talk(client, weather_tool):
    reply = client.chat.completions.create(
        model=MODEL,
        messages=ask("Hello there!"),
        tools=[weather_tool],
        tool_choice="required",
        parallel_tool_calls=False,  # allowed, greedy small talk goes on calling
        temperature=0,
        max_tokens=64,
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in reply.choices[0].message.tool_calls] == ["get_weather"]
    plain = client.chat.completions.create(
        model=MODEL,
        messages=ask("Hello there!"),
        tools=[weather_tool],
        tool_choice="none",
        temperature=0,
        max_tokens=16,
    )
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].message.content


def test_eight_concurrent_streams_decode_together_and_each_gets_its_own_answer(client, server):
    answers: dict[str, str] = {}
    peak = {"active": 0}
    engine = server.backend.engine
    all_submitted = threading.Event()
    submit, submitted = engine.submit, []

    def counting_submit(*args, **kwargs):
        stream = submit(*args, **kwargs)
        submitted.append(stream)
        if len(submitted) == len(CAPITALS):
            all_submitted.set()
        return stream

    def observe(event) -> None:  # on the engine thread: the batch each step decodes
        if event.stage == "step":
            # Hold the engine at its first step until every request is in, so the streams surely
            # share steps however the client threads happen to be scheduled.
            all_submitted.wait(timeout=120)
            peak["active"] = max(peak["active"], server.backend.load()["active"])

    def one(country: str) -> None:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=ask(f"What is the capital of {country}? Answer with the city name only."),
            max_tokens=12,
            temperature=0,
            stream=True,
        )
        answers[country] = "".join(c.choices[0].delta.content or "" for c in stream)

    engine.submit, engine.observer = counting_submit, observe
    try:
        workers = [threading.Thread(target=one, args=(country,)) for country in CAPITALS]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(300)
    finally:
        all_submitted.set()
        del engine.submit  # the instance attribute goes; the class's method is back
        engine.observer = None
    assert len(submitted) == len(CAPITALS)
    assert sorted(answers) == sorted(CAPITALS)
    for country, capital in CAPITALS.items():
        others = [city for city in CAPITALS.values() if city != capital]
        assert capital in answers[country] and not any(city in answers[country] for city in others), answers
    assert peak["active"] >= 4  # they shared the engine's steps rather than taking turns
    wait_idle(server)


def test_a_client_that_leaves_mid_stream_frees_its_request(client, server):
    story = ask("Write a very long story about a lighthouse keeper, at least a thousand words.")
    with client.chat.completions.create(
        model=MODEL, messages=story, max_tokens=2000, temperature=0, stream=True
    ) as stream:
        before = server.backend.engine.stats.tokens
        pieces = [chunk for chunk, _ in zip(stream, range(5), strict=False)]
        assert server.backend.load()["active"] == 1
    assert len(pieces) == 5
    wait_idle(server, 300.0)
    # Stopped when the client left, not after its 2000 tokens (counted, not timed: load cannot fail it).
    assert server.backend.engine.stats.tokens - before < 1000
    server.backend.engine.check_integrity()


def test_a_client_that_gives_up_on_a_whole_reply_frees_its_request(server):
    # ignore_eos (the vLLM / llama.cpp extension) keeps the reply going however the model would end it.
    body = {
        "model": MODEL,
        "messages": ask("Count from 1 to 1000, one number a line."),
        "max_tokens": 2000,
        "ignore_eos": True,
    }
    before = server.backend.engine.stats.tokens
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/chat/completions", json=body, timeout=httpx.Timeout(60, read=2.0))
    wait_idle(server, 300.0)
    assert server.backend.engine.stats.tokens - before < 1500  # stopped when the client left
    server.backend.engine.check_integrity()


def test_503_when_the_queue_is_full(model):
    # A second server on the same loaded model with its own engine: one slot and no queue.
    with start_server(model, model_id=MODEL, max_active=1, max_queued=0) as small:
        busy = openai.OpenAI(base_url=small.url, api_key="unused", max_retries=0, timeout=300)
        with busy.chat.completions.create(
            model=MODEL, messages=ask("Write a long poem about the sea."), max_tokens=500, stream=True
        ) as holder:
            next(iter(holder))  # the slot is taken
            with pytest.raises(openai.InternalServerError) as caught:
                busy.chat.completions.create(model=MODEL, messages=ask("Hi"), max_tokens=4)
            assert caught.value.status_code == 503 and caught.value.body["code"] == "queue_full"
            assert caught.value.response.headers["retry-after"] == "1"
        wait_idle(small)
        reply = busy.chat.completions.create(model=MODEL, messages=ask("Hi"), max_tokens=4)
        assert reply.usage.completion_tokens >= 1  # the slot was given back


def test_health_answers_while_eight_large_bodies_are_tokenized(server, model):
    """3.9 MB bodies fit this model's byte bound (32,768 tokens x 256 bytes), so each is really tokenized."""
    from clika_runtime.server.prompt_bound import MAX_TOKENIZING

    tokenizer = model.tokenizer
    real_encode = tokenizer.encode
    entered = threading.Semaphore(0)
    opened = threading.Event()

    def gated_encode(text, **options):
        entered.release()
        assert opened.wait(300), "the test never opened the gate"
        return real_encode(text, **options)

    body = json.dumps({"model": MODEL, "messages": ask("word " * 780_000), "max_tokens": 4}).encode()
    assert 3_800_000 < len(body) < 4 * 1024 * 1024
    results: list[httpx.Response] = []

    def send() -> None:
        with httpx.Client(timeout=600) as http:
            results.append(
                http.post(
                    server.url + "/chat/completions",
                    content=body,
                    headers={"content-type": "application/json"},
                )
            )

    tokenizer.encode = gated_encode
    senders = [threading.Thread(target=send) for _ in range(8)]
    try:
        for sender in senders:
            sender.start()
        for _ in range(MAX_TOKENIZING):  # that many tokenizations are under way (held at their start) ...
            assert entered.acquire(timeout=300)
        health = httpx.get(server.base_url + "/health", timeout=60)  # ... and the event loop answers
    finally:
        opened.set()
        for sender in senders:
            sender.join(600)
        del tokenizer.encode
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert len(results) == 8
    for response in results:  # each was tokenized in full, then refused by its length
        assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
        assert "tokens" in response.json()["error"]["message"]
    wait_idle(server)
