"""The server's protocol on a tiny random model: replies, reasoning, API key, errors, body cap, routes.

A real server on 127.0.0.1 (ephemeral port) and the real ``openai`` client;
the tiny model's replies are noise, so these checks look at the protocol, not
the words. A greedy reply must still be the same streamed and not, and the
same as the engine's own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import httpx
import openai
import pytest
from repo_paths import TEMPLATES

from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.server import start_server

KEY = "test-key"
MODEL = "tiny"
BODY_CAP = 16 * 1024


@pytest.fixture(scope="module")
def server(tiny_model):
    with start_server(
        tiny_model, model_id=MODEL, api_key=KEY, max_active=4, max_body_bytes=BODY_CAP
    ) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=60, headers={"authorization": f"Bearer {KEY}"}) as c:
        yield c


def hello(**extra):
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, **extra}


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])
    return body["error"]


# -- what works ------------------------------------------------------------------------------


def test_chat_reply_streamed_equals_whole_and_the_engines_own(client, tiny_model):
    messages = [{"role": "user", "content": "hello"}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=10,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    expected = tiny_model.generate(messages=messages, max_new_tokens=10, temperature=0.0)
    assert whole.choices[0].message.content == streamed == expected
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 10
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens > 0


def test_sampling_fields_reach_the_engine(client):
    def sample(**fields) -> str:
        reply = client.chat.completions.create(**hello(max_tokens=12), temperature=1.0, **fields)
        return reply.choices[0].message.content

    assert sample(seed=7) == sample(seed=7)
    assert len({sample(seed=seed) for seed in range(4)}) > 1  # the seed is not ignored
    assert sample(seed=7, top_p=1e-6) == sample(seed=8, top_p=1e-6)  # top_p: only the likeliest token
    greedy = client.chat.completions.create(**hello(max_tokens=24), temperature=0).choices[0].message.content
    drafted = client.chat.completions.create(
        **hello(max_tokens=24), temperature=0, extra_body={"prompt_lookup_num_tokens": 6}
    )
    assert drafted.choices[0].message.content == greedy  # the extension is read; the reply is the same
    short = client.chat.completions.create(**hello(max_tokens=None), max_completion_tokens=3)
    assert short.usage.completion_tokens == 3 and short.choices[0].finish_reason == "length"


def test_completions_read_raw_text_and_token_ids(client, tiny_model):
    prompt_ids = tiny_model.tokenizer.encode("hello world")
    stream = tiny_model.engine.submit(prompt_ids, GenerationConfig(max_new_tokens=6))
    expected = stream.result()
    by_text = client.completions.create(model=MODEL, prompt="hello world", max_tokens=6, temperature=0)
    by_ids = client.completions.create(model=MODEL, prompt=prompt_ids, max_tokens=6, temperature=0)
    assert by_text.choices[0].text == by_ids.choices[0].text == expected
    assert by_text.usage.prompt_tokens == len(prompt_ids)
    pair = client.completions.create(
        model=MODEL, prompt=["hello world", "hello world"], max_tokens=6, temperature=0
    )
    assert [c.text for c in pair.choices] == [expected, expected] and [c.index for c in pair.choices] == [
        0,
        1,
    ]


def test_stop_strings_end_the_reply_unshown(client):
    whole = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=20, temperature=0
    ).choices[0]
    text = whole.message.content
    cut = next(i for i in range(3, len(text)) if text[i] not in text[:i])  # a character seen first here
    stopped = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=20,
        temperature=0,
        stop=[text[cut]],
    ).choices[0]
    assert stopped.message.content == text[:cut] and stopped.finish_reason == "stop"


def test_completions_stream_like_the_whole_reply(client):
    whole = client.completions.create(model=MODEL, prompt="hello", max_tokens=8, temperature=0)
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="hello",
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == 8 and chunks[-2].choices[0].finish_reason == "length"


@pytest.fixture(scope="module")
def thinking_client(tiny_llama_model, tmp_path_factory):
    """The tiny model under a template whose prompt opens a reasoning block (all its noise is reasoning)."""
    folder = tmp_path_factory.mktemp("thinking") / "model"
    shutil.copytree(tiny_llama_model, folder)
    shutil.copy(TEMPLATES / "always_thinking.jinja", folder / "chat_template.jinja")
    model = modelverse.load(folder, threads=1)
    assert model.reasoning_mode == "always"
    with start_server(model, model_id=MODEL) as running:
        yield openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=60)
    model.close()


def test_reasoning_travels_as_reasoning_content_whole_and_streamed(thinking_client):
    request = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 12}
    whole = thinking_client.chat.completions.create(**request, temperature=0).choices[0].message
    reasoning = whole.model_extra["reasoning_content"]
    assert reasoning and whole.content == ""
    chunks = list(thinking_client.chat.completions.create(**request, temperature=0, stream=True))
    deltas = [c.choices[0].delta for c in chunks]
    assert "".join(d.model_extra.get("reasoning_content") or "" for d in deltas) == reasoning
    assert "".join(d.content or "" for d in deltas) == ""


def test_models_and_health(client, http, server):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    health = httpx.get(server.base_url + "/health").json()  # no key needed
    assert health["status"] == "ok" and health["model"] == MODEL and health["active"] == 0


def test_a_chat_sessions_engine_can_be_served(tiny_model):
    with tiny_model.chat_session(max_active=2) as session:
        with start_server(session, model_id=MODEL) as running:
            assert running.backend.engine is session.engine
            steps = session.engine.stats.steps
            client = openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0)
            reply = client.chat.completions.create(**hello())
            assert reply.usage.completion_tokens == 8 and session.engine.stats.steps > steps
        assert not session.engine.closed  # the server leaves the session's engine to the session
        assert session.send("hi", max_new_tokens=2) is not None


def test_a_model_served_with_an_assistant_drafts_unless_asked_not_to(tiny_llama_model, client):
    greedy = client.chat.completions.create(**hello(max_tokens=24), temperature=0).choices[0].message.content
    model = modelverse.load(tiny_llama_model, threads=1, assistant_model=tiny_llama_model)
    with start_server(model, model_id=MODEL) as running:
        assisted = openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=60)
        steps = running.backend.engine.stats.steps
        reply = assisted.chat.completions.create(**hello(max_tokens=24), temperature=0)
        drafted_steps = running.backend.engine.stats.steps - steps
        plain = assisted.chat.completions.create(
            **hello(max_tokens=24), temperature=0, extra_body={"num_assistant_tokens": 0}
        )
        plain_steps = running.backend.engine.stats.steps - steps - drafted_steps
    model.close()
    assert reply.choices[0].message.content == plain.choices[0].message.content == greedy
    # The model drafting for itself keeps every draft: far fewer steps than tokens.
    assert drafted_steps < reply.usage.completion_tokens // 2 and plain_steps >= plain.usage.completion_tokens


def test_binds_loopback_by_default(server):
    assert server.host == "127.0.0.1"


# -- refusals ---------------------------------------------------------------------------------


def test_401_without_or_with_a_wrong_key(server):
    for key in ("", "wrong"):
        client = openai.OpenAI(base_url=server.url, api_key=key or "unused", max_retries=0)
        if not key:
            client = client.with_options(default_headers={"Authorization": ""})
        with pytest.raises(openai.AuthenticationError) as caught:
            client.chat.completions.create(**hello())
        assert caught.value.status_code == 401 and caught.value.body["code"] == "invalid_api_key"
    assert httpx.get(server.url + "/models").status_code == 401


def test_404_unknown_model_and_route(client, http):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(**{**hello(), "model": "gpt-4o"})
    assert caught.value.body["code"] == "model_not_found" and "'tiny'" in caught.value.body["message"]
    response = http.post("/v1/images/generations", json={"model": MODEL, "prompt": "x"})
    assert response.status_code == 404 and "/v1/images/generations" in error_of(response)["message"]


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (b"{not json", None, "not valid JSON"),
        (b"[1, 2]", None, "JSON object"),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(),
            "model",
            "'model' is required",
        ),
        (json.dumps({"model": MODEL, "messages": []}).encode(), "messages", "non-empty"),
        (
            json.dumps({"model": MODEL, "messages": [{"role": "bot", "content": "x"}]}).encode(),
            "messages[0].role",
            "role",
        ),
        (json.dumps(hello(temperature=5)).encode(), "temperature", "temperature"),
        (json.dumps(hello(max_tokens=0)).encode(), "max_tokens", "max_tokens"),
        (json.dumps(hello(top_p=0)).encode(), "top_p", "top_p"),
        (json.dumps(hello(prompt_lookup_num_tokens=-1)).encode(), "prompt_lookup_num_tokens", "0..64"),
        (
            json.dumps(hello(num_assistant_tokens=3)).encode(),
            "num_assistant_tokens",
            "needs an assistant model",
        ),
        (json.dumps(hello(n=9)).encode(), "n", "'n' must be an integer from 1 to 8"),
        (json.dumps(hello(stop=["a", "b", "c", "d", "e"])).encode(), "stop", "at most 4"),
        (json.dumps(hello(tool_choice="required")).encode(), "tool_choice", "needs 'tools'"),
        (json.dumps(hello(stream_options={"include_usage": True})).encode(), "stream_options", "stream"),
    ],
)
def test_400_names_the_bad_field(http, body, param, words):
    response = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    error = error_of(response)
    assert error["type"] == "invalid_request_error" and error["param"] == param and words in error["message"]


def test_400_for_a_prompt_longer_than_the_context(client, tiny_model):
    long_text = "hello " * (tiny_model.max_seq * 2)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long_text}])
    assert (
        caught.value.body["code"] == "context_length_exceeded"
        and str(tiny_model.max_seq) in caught.value.body["message"]
    )
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**{**hello(), "max_tokens": tiny_model.max_seq})
    assert caught.value.body["code"] == "context_length_exceeded"


def test_400_for_tools_offered_to_a_model_without_a_tools_slot(client):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**hello(), tools=[tool])
    assert caught.value.body["param"] == "tools" and "takes no tools" in caught.value.body["message"]


def test_413_for_a_body_over_the_cap(http):
    big = json.dumps(hello(messages=[{"role": "user", "content": "x" * BODY_CAP}]))
    response = http.post("/v1/chat/completions", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413 and error_of(response)["code"] == "request_too_large"

    def chunked():  # no content-length: the cap holds while reading
        yield big[: BODY_CAP // 2].encode()
        yield big[BODY_CAP // 2 :].encode()

    response = http.post(
        "/v1/chat/completions", content=chunked(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413


def test_the_engine_is_clean_after_all_that(server):
    deadline = time.monotonic() + 300  # a bound against a hang, not a timing check
    while server.backend.load() != {"active": 0, "waiting": 0} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.backend.load() == {"active": 0, "waiting": 0}
    server.backend.engine.check_integrity()


# -- the command ----------------------------------------------------------------------------


def test_clika_serve_command_serves_a_model_folder_and_stops_on_ctrl_c(tiny_llama_model):
    command = [sys.executable, "-m", "clika_cli.main", "serve", str(tiny_llama_model), "--port", "0"]
    command += [
        "--model-id",
        "m",
        "--threads",
        "1",
        "--assistant",
        str(tiny_llama_model),
        "--cors-origins",
        "http://a.example, http://b.example",
    ]  # drafting for itself
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        url = _served_url(process)
        reply = openai.OpenAI(base_url=url, api_key="none", max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert reply.usage.completion_tokens == 4 and url.startswith("http://127.0.0.1:")
        preflight = {"Origin": "http://b.example", "Access-Control-Request-Method": "POST"}
        allowed = httpx.options(url + "/chat/completions", headers=preflight)
        assert allowed.headers["access-control-allow-origin"] == "http://b.example"
        process.send_signal(2)  # Ctrl-C
        assert process.wait(timeout=30) == 0
        log = process.stderr.read()
        assert '"POST /v1/chat/completions" 200' in log  # one access-log line per request
    finally:
        process.kill()
        process.wait()


def _served_url(process: subprocess.Popen) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if " at http://" in line:
            return line.split(" at ")[1].split()[0]
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"clika serve did not report its address (exit {process.poll()})")
