"""The routing key a request gets (no Ray needed) and the merged /metrics of the replicas."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from clika_runtime.cluster.aggregate import merged_health, merged_metrics
from clika_runtime.cluster.prefix_key import PrefixKeyer
from clika_runtime.engine.kv.prefix_cache import ROOT_HASH, chain_hash

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def keyer(tiny_llama_model):
    return PrefixKeyer(tiny_llama_model)


def key(keyer, messages, headers=(), **fields):
    return keyer.route_key(CHAT, list(headers), json.dumps({"messages": messages, **fields}).encode())


def test_every_turn_of_a_conversation_has_its_first_turns_key(keyer):
    first = [
        {"role": "system", "content": "You answer in one word. " * 4},
        {"role": "user", "content": "A color?"},
    ]
    later = [*first, {"role": "assistant", "content": "Red"}, {"role": "user", "content": "Another?"}]
    other = [first[0], {"role": "user", "content": "A fruit?"}]
    assert key(keyer, first) == key(keyer, later) != key(keyer, other)
    assert key(keyer, first).startswith("prefix:")


def test_the_key_is_the_paged_caches_chain_hash_of_the_first_blocks(keyer):
    size = keyer.block_size
    tokens = list(range(3 * size + 5))
    expected = ROOT_HASH
    for start in range(0, 3 * size, size):
        expected = chain_hash(expected, tuple(tokens[start : start + size]))
    assert keyer.key_of(tokens[: 3 * size]) == expected
    assert keyer.key_of(tokens) == chain_hash(expected, tuple(tokens[3 * size :]))  # the partial tail last


def test_a_session_id_wins_over_the_prefix(keyer):
    messages = [{"role": "user", "content": "hi"}]
    assert key(keyer, messages, [(b"X-Session-Id", b"abc")], user="u1") == "session:abc"
    assert key(keyer, messages, user="u1") == "session:u1"
    assert keyer.route_key("/api/generate", [], json.dumps({"prompt": "hello"}).encode()).startswith(
        "prefix:"
    )
    assert keyer.route_key(CHAT, [], b"not json") is None  # the replica answers it with its 400
    assert keyer.route_key("/v1/models", [], b"") is None


def test_merged_metrics_label_every_sample_with_its_replica():
    def exposition(value: float) -> str:
        registry = CollectorRegistry()
        Counter("clika_prompt_tokens", "Prompt tokens", registry=registry).inc(value)
        return generate_latest(registry).decode()

    merged = merged_metrics({"a": exposition(5), "b": exposition(7)})
    [family] = [f for f in text_string_to_metric_families(merged) if f.name == "clika_prompt_tokens"]
    totals = {(s.labels["replica"], s.value) for s in family.samples if s.name.endswith("_total")}
    assert totals == {("a", 5.0), ("b", 7.0)}
    health = merged_health("m", {"a": {"active": 1, "waiting": 2}, "b": None})
    assert health["status"] == "degraded" and health["active"] == 1 and health["waiting"] == 2
    assert health["replicas"]["b"] == {"status": "unreachable"}
