"""Ollama's API on the server, through the real ``ollama`` client and litellm's ``ollama_chat/`` route.

A real server on 127.0.0.1 over the tiny model (its replies are noise, so
these checks compare replies with the engine's own greedy decode), and one
real-model check on SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import os

import httpx
import ollama
import pytest
from repo_paths import TEMPLATES

from clika_runtime import modelverse
from clika_runtime.server import start_server

# litellm would fetch its model price list from the network when imported; the packaged copy is enough.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MODEL = "tiny"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def server(tiny_model):
    with start_server(tiny_model, model_id=MODEL, max_active=4) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.base_url, timeout=60)


def greedy(model, messages, tokens: int) -> str:
    return model.generate(messages=messages, max_new_tokens=tokens, temperature=0.0)


def test_chat_whole_and_streamed_equal_the_engines_greedy_reply(client, tiny_model):
    options = {"temperature": 0, "num_predict": 8}
    whole = client.chat(model=MODEL, messages=HELLO, options=options, stream=False)
    chunks = list(client.chat(model=MODEL, messages=HELLO, options=options, stream=True))
    expected = greedy(tiny_model, HELLO, 8)
    assert whole.message.role == "assistant" and whole.message.content == expected
    assert "".join(chunk.message.content for chunk in chunks) == expected
    assert whole.done and whole.done_reason == "length" and whole.eval_count == 8
    assert whole.prompt_eval_count > 0 and whole.total_duration > 0
    assert [chunk.done for chunk in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].eval_count == 8 and chunks[-1].done_reason == "length"


def test_generate_templated_raw_and_streamed(client, tiny_model):
    options = {"temperature": 0, "num_predict": 6}
    templated = client.generate(model=MODEL, prompt="hello", options=options)
    assert templated.response == greedy(tiny_model, HELLO, 6) and templated.done
    with_system = client.generate(model=MODEL, prompt="hello", system="be brief", options=options)
    expected = greedy(tiny_model, [{"role": "system", "content": "be brief"}, *HELLO], 6)
    assert with_system.response == expected
    raw = client.generate(model=MODEL, prompt="hello world", raw=True, options=options)
    ids = tiny_model.tokenizer.encode("hello world")
    assert raw.response == tiny_model.engine.submit(ids, tiny_model.defaults.overlay(
        {"max_new_tokens": 6, "temperature": 0.0}
    )).result()  # fmt: skip
    streamed = list(client.generate(model=MODEL, prompt="hello", options=options, stream=True))
    assert "".join(part.response for part in streamed) == templated.response
    assert streamed[-1].done and streamed[-1].eval_count == 6
    assert client.generate(model=MODEL).done_reason == "load"  # no prompt: Ollama's "load the model"


def test_ollama_options_reach_the_engine(client):
    def sample(**options) -> str:
        reply = client.chat(
            model=MODEL, messages=HELLO, options={"num_predict": 12, "temperature": 1.0, **options}
        )
        return reply.message.content

    assert sample(seed=3) == sample(seed=3)
    assert len({sample(seed=seed) for seed in range(4)}) > 1
    assert sample(seed=3, top_k=1) == sample(seed=4, top_k=1)  # top_k 1: greedy whatever the seed
    text = client.chat(
        model=MODEL, messages=HELLO, options={"num_predict": 20, "temperature": 0}
    ).message.content
    cut = next(i for i in range(3, len(text)) if text[i] not in text[:i])
    stopped = client.chat(
        model=MODEL, messages=HELLO, options={"num_predict": 20, "temperature": 0, "stop": [text[cut]]}
    )
    assert stopped.message.content == text[:cut] and stopped.done_reason == "stop"
    runtime_only = {"num_ctx": 4096, "num_thread": 2, "num_gpu": 0, "use_mmap": True, "repeat_last_n": -1}
    assert sample(seed=3, **runtime_only) == sample(seed=3)


@pytest.mark.parametrize(
    ("request_fields", "status", "words"),
    [
        ({"options": {"mirostat": 2}}, 400, "mirostat"),
        ({"options": {"num_predict": 0}}, 400, "num_predict"),
        ({"options": {"repeat_last_n": 64}}, 400, "repeat_last_n"),
        ({"options": {"no_such_option": 1}}, 400, "no_such_option"),
        ({"format": {"type": "nope"}}, 400, "format"),
        ({"model": "llama3"}, 404, "llama3"),
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
    ],
)
def test_refusals_are_ollama_errors_naming_the_problem(client, request_fields, status, words):
    fields = {"model": MODEL, "messages": HELLO, **request_fields}
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(**fields)
    assert caught.value.status_code == status and words in caught.value.error


def test_hostile_bodies_are_400s_in_ollamas_shape(server):
    for raw in (
        b'{"model": "tiny", "messages": [{"role": "user", "content": "a\\ud800"}]}',
        b'{"model": "tiny", "messages": ' + b"[" * 1000 + b"]" * 1000 + b"}",
        b'{"model": "tiny", "prompt": "x", "options": {"seed": ' + b"7" * 5000 + b"}}",
        # Found by the fuzz tier: tool_calls that are not a list were a TypeError, a 500.
        b'{"model": "tiny", "messages": [{"role": "assistant", "content": "", "tool_calls": true}]}',
        b'{"model": "tiny", "messages": [{"role": "assistant", "content": "", "tool_calls": {"a": 1}}]}',
    ):
        path = "/api/generate" if b'"prompt"' in raw else "/api/chat"
        response = httpx.post(server.base_url + path, content=raw, timeout=60)
        assert response.status_code == 400 and set(response.json()) == {"error"}


def test_list_show_ps_version_and_embed(client, server, tiny_model):
    [listed] = client.list().models
    assert listed.model == "tiny:latest" and listed.size > 0 and len(listed.digest) == 64
    assert listed.details.family == "llama" and listed.details.format == "onnx"
    shown = client.show("tiny:latest")
    assert "completion" in shown.capabilities and "tools" not in shown.capabilities
    assert shown.template == tiny_model.chat_template.source
    assert shown.modelinfo["llama.context_length"] == tiny_model.max_seq
    [running] = client.ps().models
    assert running.model == "tiny:latest" and running.context_length == tiny_model.max_seq
    assert httpx.get(server.base_url + "/api/version").json()["version"]
    embedded = client.embed(model=MODEL, input="hello")
    assert embedded.embeddings[0] == pytest.approx(tiny_model.embed("hello").tolist(), abs=1e-6)


def test_litellm_ollama_chat_route(server, tiny_model):
    import litellm

    expected = greedy(tiny_model, HELLO, 8)
    fields = {"model": f"ollama_chat/{MODEL}", "api_base": server.base_url, "messages": HELLO}
    whole = litellm.completion(**fields, max_tokens=8, temperature=0)
    assert whole.choices[0].message.content == expected
    assert whole.usage.completion_tokens == 8 and whole.choices[0].finish_reason == "length"
    chunks = list(litellm.completion(**fields, max_tokens=8, temperature=0, stream=True))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == expected


@pytest.mark.slow
def test_ollama_client_on_smollm2(smollm2_fp32):
    model = modelverse.load(smollm2_fp32, threads=1)
    try:
        with start_server(model, model_id="smollm2") as running:
            client = ollama.Client(host=running.base_url, timeout=300)
            question = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
            options = {"temperature": 0, "num_predict": 16}
            reply = client.chat(model="smollm2", messages=question, options=options)
            streamed = "".join(
                c.message.content
                for c in client.chat(model="smollm2", messages=question, options=options, stream=True)
            )
            generated = client.generate(model="smollm2", prompt=question[0]["content"], options=options)
            shown = client.show("smollm2")
    finally:
        model.close()
    assert "Paris" in reply.message.content and reply.done_reason == "stop"
    assert streamed == reply.message.content == generated.response
    assert shown.details.family == "llama" and shown.modelinfo["llama.context_length"] == model.max_seq


@pytest.mark.slow
def test_ollama_tool_call_round_trip_on_qwen(qwen05_gguf, weather_tool):
    from clika_export.api import cached_export

    model = modelverse.load(cached_export(qwen05_gguf, "int4", progress=False))
    question = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    options = {"temperature": 0, "num_predict": 64}
    try:
        with start_server(model, model_id="qwen") as running:
            client = ollama.Client(host=running.base_url, timeout=300)
            called = client.chat(model="qwen", messages=question, tools=[weather_tool], options=options)
            streamed = list(
                client.chat(
                    model="qwen", messages=question, tools=[weather_tool], options=options, stream=True
                )
            )
            history = [
                {
                    "role": "system",
                    "content": "When a tool result arrives, answer the question with it in one sentence.",
                },
                *question,
                called.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_name": "get_weather", "content": "18 degrees Celsius, light rain"},
            ]
            answer = client.chat(model="qwen", messages=history, options=options)
            assert "tools" in client.show("qwen").capabilities
    finally:
        model.close()
    [call] = called.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    [streamed_call] = [c for chunk in streamed for c in chunk.message.tool_calls or ()]
    assert streamed_call.function.arguments == {"city": "Paris"} and streamed[-1].done
    assert answer.done_reason == "stop" and "18" in answer.message.content


def test_reasoning_travels_as_thinking(tiny_llama_model, tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_llama_model, folder)
    shutil.copy(TEMPLATES / "always_thinking.jinja", folder / "chat_template.jinja")
    model = modelverse.load(folder, threads=1)
    options = {"temperature": 0, "num_predict": 12}
    try:
        with start_server(model, model_id=MODEL) as running:
            client = ollama.Client(host=running.base_url, timeout=60)
            whole = client.chat(model=MODEL, messages=HELLO, options=options)
            streamed = list(client.chat(model=MODEL, messages=HELLO, options=options, stream=True))
            generated = client.generate(model=MODEL, prompt="hello", options=options)
            shown = client.show(MODEL)
    finally:
        model.close()
    assert whole.message.thinking and whole.message.content == ""
    assert "".join(chunk.message.thinking or "" for chunk in streamed) == whole.message.thinking
    assert generated.thinking == whole.message.thinking and "thinking" in shown.capabilities
