"""One engine per loaded model: every front end's requests run on it, its observer sees them all.

``generate``, ``chat``, a ``ChatSession``, an ``AsyncChat`` session and the
server (a real one on 127.0.0.1 with the real ``openai`` client) each run one
request on a tiny random model; the stage observer set once on the model sees
each of them, and they all hold one KV cache.
"""

from __future__ import annotations

import asyncio
import threading

import openai

from clika_runtime import modelverse
from clika_runtime.server import start_server
from clika_runtime.sessions import AsyncChat

GREEDY = {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": True}
HELLO = [{"role": "user", "content": "hello"}]


def decoded_requests(events) -> list[int]:
    """The request ids the observer saw decode, in order."""
    return [e.request_id for e in events if e.stage == "decode"]


def test_an_observer_set_once_sees_the_requests_of_every_front_end(tiny_llama_model):
    model = modelverse.load(tiny_llama_model, threads=1)
    events = []
    model.set_stage_observer(events.append)
    try:
        model.generate("hello", **GREEDY)
        model.chat(HELLO, **GREEDY)
        with model.chat_session() as session:
            session.send("hello", **GREEDY)
            assert session.engine is model.engine
        chat = AsyncChat(model)
        asyncio.run(chat.create_session().send("hello", **GREEDY))
        assert chat.engine is model.engine
        chat.close()
        with start_server(model, model_id="tiny", max_active=2) as server:
            client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60)
            client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=6, temperature=0)
            assert server.backend.engine is model.engine
        seen = decoded_requests(events)
        assert len(seen) == len(set(seen)) == 5, f"one decode event per front end's request, got {seen}"
        assert {e.request_id for e in events if e.stage == "detokenize"} == set(seen)
        assert (
            model.engine.max_active == 4
        )  # AsyncChat raised the load's 1 to its 4; the server's 2 lowered nothing
        model.engine.check_integrity()
    finally:
        model.close()


def test_eight_sessions_hold_one_kv_cache(tiny_llama_model):
    model = modelverse.load(tiny_llama_model, threads=1)
    try:
        sessions = [model.chat_session(system=f"You are assistant {i}.") for i in range(8)]
        replies = [s.send("hello", **GREEDY) for s in sessions]
        one_slot = model.residency["pipeline"]
        assert one_slot["slots"] == 1, "eight sessions at max_active=1 share the engine's one slot"
        alone = modelverse.load(tiny_llama_model, threads=1)
        try:
            for session, reply in zip(sessions, replies, strict=True):
                assert reply == alone.chat(session.messages[:2], **GREEDY)  # the same reply on its own
        finally:
            alone.close()
        for s in sessions:
            s.close()
    finally:
        model.close()


def test_reports_travel_with_each_stream_when_threads_generate_together(tiny_llama_model):
    model = modelverse.load(tiny_llama_model, threads=1, max_active=4)
    prompts = [f"prompt number {i}" for i in range(6)]
    results: dict[int, tuple[str, object]] = {}
    start = threading.Barrier(len(prompts))

    def worker(i: int) -> None:
        start.wait()
        reply = model.stream_generate(prompts[i], **{**GREEDY, "max_new_tokens": 3 + i})
        text = "".join(reply)
        results[i] = (text, reply.report)

    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (text, report) in results.items():
            assert report is not None and report.completion_tokens == 3 + i  # each stream's own report
            assert text == model.generate(prompts[i], **{**GREEDY, "max_new_tokens": 3 + i})
        assert model.report is not None
        model.engine.check_integrity()
    finally:
        model.close()
