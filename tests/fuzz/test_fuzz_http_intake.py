"""The HTTP intake, fuzzed in process (starlette's test client on the app, the tiny model behind it):
OpenAI chat, completions and Responses bodies, content parts, Ollama's chat and generate with
their options.

Property: every request is answered with a 2xx or a 4xx whose JSON body names
the problem (never a 5xx, never a hang), and once the cases are done the
engine holds no request and its bookkeeping is intact (no state lost).
"""

from __future__ import annotations

import base64
import json

import pytest
from fuzz_budget import budget, count
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from clika_runtime.server import build_backend
from clika_runtime.server.app import create_app

MODEL = "tiny"
json_scalars = st.none() | st.booleans() | st.integers(-(2**66), 2**66) | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
PNG_1x1 = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8cfc000"
        "0003010100c9fe92ef0000000049454e44ae426082"
    )
).decode()
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=12)}),
    st.fixed_dictionaries(
        {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": st.sampled_from(
            [f"data:image/png;base64,{PNG_1x1}", "data:image/png;base64,AAAA", "http://x/y.png",
             "file:///etc/passwd", "data:,", "data:image/png;base64," + "A" * 5000])})}
    ),
    st.fixed_dictionaries({"type": st.just("input_audio"), "input_audio": st.fixed_dictionaries(
        {"data": st.sampled_from(["AAAA", "UklGRg==", ""]), "format": st.sampled_from(["wav", "mp3", 3])})}),
    st.dictionaries(st.sampled_from(["type", "text", "image_url", "x"]), json_values, max_size=3),
)  # fmt: skip
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "x"]),
         "content": st.text(max_size=20) | st.lists(parts, max_size=3) | json_values},
        optional={"tool_calls": json_values, "name": json_values, "tool_call_id": json_values},
    ),
    max_size=3,
)  # fmt: skip
OPENAI_FIELDS = {
    "max_tokens": st.integers(-2, 6) | json_scalars, "temperature": st.floats(-1, 3) | json_scalars,
    "top_p": json_scalars, "top_k": json_scalars, "n": st.integers(-1, 3) | json_scalars,
    "stop": json_values, "seed": json_scalars, "logprobs": json_scalars, "top_logprobs": st.integers(-1, 30),
    "tools": json_values, "tool_choice": json_values, "response_format": json_values,
    "stream": st.booleans() | json_scalars, "presence_penalty": json_scalars, "logit_bias": json_values,
    "max_completion_tokens": st.integers(-1, 6), "reasoning_effort": json_scalars, "user": json_scalars,
}  # fmt: skip
OLLAMA_OPTIONS = {
    "num_ctx": st.integers(-1, 10**9) | json_scalars, "num_predict": st.integers(-2, 6) | json_scalars,
    "temperature": json_scalars, "top_k": json_scalars, "stop": json_values, "seed": json_scalars,
    "repeat_penalty": json_scalars, "mirostat": json_scalars, "num_thread": json_scalars,
}  # fmt: skip


def _body(fields: dict, **required) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries(required, optional=fields)


bodies = st.one_of(
    st.tuples(st.just("/v1/chat/completions"), _body(OPENAI_FIELDS, model=st.just(MODEL), messages=messages)),
    st.tuples(st.just("/v1/completions"), _body(OPENAI_FIELDS, model=st.just(MODEL), prompt=json_values)),
    st.tuples(st.just("/v1/responses"), _body(OPENAI_FIELDS, model=st.just(MODEL), input=st.text(max_size=10) | messages)),
    st.tuples(st.just("/api/chat"), _body({"options": st.fixed_dictionaries({}, optional=OLLAMA_OPTIONS) | json_values,
              "format": json_values, "stream": json_scalars, "think": json_scalars},
              model=st.just(MODEL), messages=messages)),
    st.tuples(st.just("/api/generate"), _body({"options": st.fixed_dictionaries({}, optional=OLLAMA_OPTIONS),
              "stream": st.just(False), "raw": json_scalars, "system": json_values, "images": json_values},
              model=st.just(MODEL), prompt=json_values)),
    st.tuples(st.sampled_from(["/v1/chat/completions", "/api/chat", "/v1/embeddings"]), json_values),
)  # fmt: skip


@pytest.fixture(scope="module")
def client(tiny_model):
    backend = build_backend(tiny_model, model_id=MODEL, max_active=4)
    with TestClient(create_app(backend), raise_server_exceptions=False) as http:
        yield http, backend
    backend.engine.check_integrity()


@given(request=bodies)
@budget(1000)
def test_every_request_is_answered_with_a_2xx_or_a_named_4xx(client, request):
    count("HTTP intake (OpenAI, Responses, Ollama bodies)")
    http, _ = client
    path, body = request
    raw = json.dumps(body).encode()  # NaN and Infinity too, as a careless client writes them
    response = http.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code >= 400:
        error = response.json().get("error")
        assert error, response.text[:300]


def test_no_request_is_left_behind(client):
    http, backend = client
    assert backend.load() == {"active": 0, "waiting": 0}
    backend.engine.check_integrity()
