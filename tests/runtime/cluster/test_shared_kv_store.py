"""A conversation's KV saved by one replica's store and installed by another's (no Ray needed).

Two loads of one model folder stand for two replicas sharing a store folder: the second
turn on the other replica starts from the KV the first one saved, and replies as it would
have after reading the whole conversation again.
"""

from __future__ import annotations

import asyncio
import json

from clika_runtime import modelverse
from clika_runtime.cluster.forwarded import ForwardedRequest
from clika_runtime.cluster.kv_store import SharedKVStore

CHAT = "/v1/chat/completions"


def request(messages: list[dict]) -> ForwardedRequest:
    body = json.dumps({"model": "tiny", "messages": messages}).encode()
    return ForwardedRequest({"type": "http", "path": CHAT}, body, route_key="session:s1")


def test_a_conversation_continues_on_another_replica_from_the_shared_store(tiny_llama_model, tmp_path):
    first = [{"role": "user", "content": "hello there, how are you today?"}]
    one = modelverse.load(tiny_llama_model, threads=1)
    other = modelverse.load(tiny_llama_model, threads=1)
    fresh = modelverse.load(tiny_llama_model, threads=1)
    try:
        saving, restoring = SharedKVStore(tmp_path, one), SharedKVStore(tmp_path, other)
        conversation = asyncio.run(saving.before(request(first)))
        assert conversation is not None and saving.restored_tokens == 0  # nothing saved yet
        reply = one.generate(messages=first, max_new_tokens=6, temperature=0.0)
        asyncio.run(saving.after(conversation))
        assert conversation.path.is_file()

        later = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "and then?"}]
        asyncio.run(restoring.before(request(later)))
        assert restoring.restored_tokens >= len(conversation.prompt.token_ids) - 1 > 0
        continued = other.generate(messages=later, max_new_tokens=6, temperature=0.0)
        assert other.report.cached_tokens > 0  # the restored KV was used, not read again
        assert continued == fresh.generate(messages=later, max_new_tokens=6, temperature=0.0)
    finally:
        for model in (one, other, fresh):
            model.close()
