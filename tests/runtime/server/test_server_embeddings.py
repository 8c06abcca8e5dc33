"""Embeddings on the server through real clients: ``openai``'s ``embeddings.create`` and ``ollama``'s ``embed``.

A real server on 127.0.0.1 over SmolLM2-135M-Instruct int4 (its export from
the cache, given the hidden_states output when it predates it). Semantic
closeness is not asserted (no guarantee for a chat model's hidden states);
what must hold: every front end returns the vectors ``GenerativeModel.embed``
returns, normalized, deterministic, the same alone or batched, pooled as the
manifest says; bad input is a 400 naming the field.
"""

from __future__ import annotations

import httpx
import numpy as np
import ollama
import openai
import pytest

from clika_export.api import cached_export
from clika_runtime import modelverse
from clika_runtime.server import start_server

MODEL = "smollm2"
TEXTS = [
    "The cat sat on the mat.",
    "Quarterly revenue rose by five percent.",
    "hi",
    "Paris is the capital of France, and its largest city by far.",
]
BODY_CAP = 64 * 1024


@pytest.fixture(scope="module")
def model(smollm2_gguf):
    loaded = modelverse.load(cached_export(smollm2_gguf, "int4", progress=False), threads=2)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def server(model):
    with start_server(model, model_id=MODEL, max_active=4, max_body_bytes=BODY_CAP) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def expected(model):
    return model.embed(TEXTS)


def test_openai_float_and_base64_equal_the_models_vectors(client, model, expected) -> None:
    as_float = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    as_base64 = client.embeddings.create(
        model=MODEL, input=TEXTS
    )  # the client asks for base64 and decodes it
    for reply in (as_float, as_base64):
        assert [item.index for item in reply.data] == list(range(len(TEXTS)))
        vectors = np.array([item.embedding for item in reply.data])
        assert vectors.shape == (len(TEXTS), 576)
        np.testing.assert_allclose(vectors, expected, atol=1e-6)
        tokens = sum(len(model.embedder.tokens(text)) for text in TEXTS)
        assert reply.usage.prompt_tokens == reply.usage.total_tokens == tokens
        assert reply.model == MODEL


def test_vectors_are_normalized_deterministic_and_batch_independent(client, expected) -> None:
    np.testing.assert_allclose(np.linalg.norm(expected, axis=1), 1.0, atol=1e-5)
    again = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    np.testing.assert_array_equal(np.array([item.embedding for item in again.data], np.float32), expected)
    for text, vector in zip(TEXTS, expected, strict=True):
        alone = client.embeddings.create(model=MODEL, input=text, encoding_format="float")
        np.testing.assert_allclose(alone.data[0].embedding, vector, atol=1e-5)


def test_the_manifests_pooling_is_honoured(model, expected) -> None:
    assert model.embedder.pooling == "mean"  # a chat GGUF names no pooling_type
    ids = [model.embedder.tokens(text) for text in TEXTS]
    hidden = model.embedder.runner.run(ids)
    for states, vector in zip(hidden, expected, strict=True):
        mean = states.mean(axis=0)
        np.testing.assert_allclose(vector, mean / np.linalg.norm(mean), atol=1e-5)
        if len(states) > 1:  # "hi" is one token: its mean is its last
            last = states[-1] / np.linalg.norm(states[-1])
            assert np.abs(vector - last).max() > 1e-3


def test_token_id_inputs_and_dimensions(client, model, expected) -> None:
    ids = [model.embedder.tokens(text) for text in TEXTS]
    nested = client.embeddings.create(model=MODEL, input=ids, encoding_format="float")
    np.testing.assert_allclose([item.embedding for item in nested.data], expected, atol=1e-5)
    flat = client.embeddings.create(model=MODEL, input=ids[0], encoding_format="float")
    np.testing.assert_allclose(flat.data[0].embedding, expected[0], atol=1e-5)
    cut = client.embeddings.create(model=MODEL, input=TEXTS, dimensions=64)
    vectors = np.array([item.embedding for item in cut.data])
    assert vectors.shape == (len(TEXTS), 64)
    np.testing.assert_allclose(
        vectors, expected[:, :64] / np.linalg.norm(expected[:, :64], axis=1)[:, None], atol=1e-5
    )


def test_ollama_embed_and_the_legacy_route(server, model, expected) -> None:
    client = ollama.Client(host=server.base_url, timeout=60)
    reply = client.embed(model=MODEL, input=TEXTS)
    np.testing.assert_allclose(np.array(reply.embeddings), expected, atol=1e-6)
    assert reply.prompt_eval_count == sum(len(model.embedder.tokens(text)) for text in TEXTS)
    assert reply.model == MODEL
    one = client.embed(model=MODEL + ":latest", input=TEXTS[0])
    np.testing.assert_allclose(one.embeddings[0], expected[0], atol=1e-5)
    legacy = client.embeddings(model=MODEL, prompt=TEXTS[0])
    np.testing.assert_allclose(legacy.embedding, expected[0], atol=1e-5)
    assert client.embed(model=MODEL, input=[]).embeddings == []  # Ollama's "load the model"


def test_ollama_truncates_unless_told_not_to(tiny_model) -> None:
    # On the tiny model (a 128-token window): a full SmolLM2 window takes minutes on two cores.
    with start_server(tiny_model, model_id="tiny") as running:
        client = ollama.Client(host=running.base_url, timeout=60)
        long_text = "word " * tiny_model.max_seq
        cut = client.embed(model="tiny", input=long_text)
        assert cut.prompt_eval_count == tiny_model.max_seq
        np.testing.assert_allclose(cut.embeddings[0], tiny_model.embed(long_text, truncate=True), atol=1e-6)
        with pytest.raises(ollama.ResponseError) as refused:
            client.embed(model="tiny", input=long_text, truncate=False)
        assert refused.value.status_code == 400 and "context window" in refused.value.error
        legacy = client.embeddings(model="tiny", prompt=long_text)  # the legacy route always truncates
        np.testing.assert_allclose(legacy.embedding, cut.embeddings[0], atol=1e-6)


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"model": MODEL}, "input", "'input' is required"),
        ({"model": MODEL, "input": []}, "input", "empty list"),
        ({"model": MODEL, "input": ""}, "input", "item 0 is empty"),
        ({"model": MODEL, "input": ["a", [1, 2]]}, "input", "not a mix"),
        ({"model": MODEL, "input": [[1], []]}, "input", "item 1 is empty"),
        ({"model": MODEL, "input": {"text": "a"}}, "input", "must be a string"),
        ({"model": MODEL, "input": [10**9]}, "input", "outside 0..49151"),
        ({"model": MODEL, "input": "a", "encoding_format": "hex"}, "encoding_format", "float, base64"),
        ({"model": MODEL, "input": "a", "dimensions": 0}, "dimensions", "positive integer"),
        ({"model": MODEL, "input": "a", "dimensions": 577}, "dimensions", "between 1 and 576"),
        ({"input": "a"}, "model", "'model' is required"),
        ({"model": MODEL, "input": "word " * 9000}, "input", "context window"),
    ],
)
def test_bad_openai_bodies_are_400s_naming_the_field(server, body, param, message) -> None:
    reply = httpx.post(server.base_url + "/v1/embeddings", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and message in error["message"]
    assert error["type"] == "invalid_request_error"


def test_embedded_tokens_are_counted_in_the_metrics(server, client, model) -> None:
    def counted() -> float:
        text = httpx.get(server.base_url + "/metrics").text
        line = next(line for line in text.splitlines() if line.startswith("clika_embedded_tokens_total"))
        return float(line.split()[-1])

    before = counted()
    client.embeddings.create(model=MODEL, input=TEXTS[:2])
    assert counted() - before == sum(len(model.embedder.tokens(text)) for text in TEXTS[:2])


def test_the_openai_client_sees_a_bad_request(client) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=MODEL, input=[])
    assert refused.value.body["param"] == "input"
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="another-model", input="a")


def test_bodies_over_the_cap_are_refused_before_any_work(server) -> None:
    reply = httpx.post(server.base_url + "/v1/embeddings", json={"model": MODEL, "input": "a" * BODY_CAP})
    assert reply.status_code == 413
    assert reply.json()["error"]["type"] == "invalid_request_error"
    ollama_reply = httpx.post(server.base_url + "/api/embed", json={"model": MODEL, "input": "a" * BODY_CAP})
    assert ollama_reply.status_code == 413 and "error" in ollama_reply.json()
    bad = httpx.post(server.base_url + "/api/embed", json={"model": MODEL, "input": [1]})
    assert bad.status_code == 400 and "list of strings" in bad.json()["error"]
