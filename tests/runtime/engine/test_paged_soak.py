"""Soak: 300 requests through a paged engine on a small KV budget, with shared prefixes and cancellations.

A tiny random llama runs through the real paged graph with room for only a
few requests' KV at once, so admission waits, cached blocks are evicted and
running requests are preempted and recomputed, and some requests are cancelled
while they wait and others right after their first token. Afterwards every
block must be free or cached, the pool's bookkeeping must hold, and every
reply that was not cancelled must equal the same request decoded by a
continuous engine.

Nothing depends on thread timing: the engine holds after its first step until
every request is queued, and running requests are cancelled from the engine's
own thread when their first token comes, so each run schedules exactly the
same steps.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np
import pytest

from clika_runtime import modelverse
from clika_runtime.contract.manifest import Manifest
from clika_runtime.engine.config import GenerationConfig

CONTEXT = 512
REQUESTS = 300


@pytest.fixture(scope="module")
def tiny(make_tiny_hf, tiny_zoo) -> Path:
    _, hf = tiny_zoo.checkpoint(make_tiny_hf, "llama", layers=2, max_position_embeddings=CONTEXT)
    return tiny_zoo.export(hf)


def workload(seed: int = 0, drafting: bool = False) -> list[tuple[list[int], GenerationConfig]]:
    """The requests; ``drafting``: every other one drafts by prompt lookup (the tiny model's replies loop)."""
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(0, 256, n).tolist() for n in (0, 40, 64, 130, 200)]
    requests = []
    for _ in range(REQUESTS):
        prefix = prefixes[int(rng.integers(len(prefixes)))]
        tail = rng.integers(0, 256, int(rng.integers(1, 60))).tolist()
        lookup = 6 if drafting and len(requests) % 2 else 0
        config = GenerationConfig(
            max_new_tokens=int(rng.integers(1, 120)), ignore_eos=True, prompt_lookup_num_tokens=lookup
        )
        requests.append((prefix + tail, config))
    return requests


def submit_in_a_fixed_order(model, requests):
    """Submit every request and cancel a fifth of them, the same way on every run.

    The first request is submitted alone; the engine's first step (of it alone)
    holds in the stage observer until all other requests are queued and the
    waiting ones to cancel are cancelled; the others to cancel
    are cancelled by the observer itself when their first token arrives (on the
    engine thread, so the cancel is taken before the next step).
    """
    chosen = random.Random(1).sample(range(1, REQUESTS), REQUESTS // 5)
    while_waiting = set(chosen[: len(chosen) // 2])
    # After the first token: requests that have more than one token to make.
    after_first = {i + 1 for i in chosen[len(chosen) // 2 :] if requests[i][1].max_new_tokens > 1}
    held, queued = threading.Event(), threading.Event()
    engine = model.engine

    def observe(event) -> None:
        if event.stage == "step" and not queued.is_set():
            held.set()
            queued.wait()
        elif event.stage == "prefill" and event.request_id in after_first:
            engine.cancel(event.request_id)

    model.set_stage_observer(observe)
    streams = [engine.submit(*requests[0], request_id=1)]
    held.wait()
    streams += [
        engine.submit(prompt, config, request_id=index + 1)
        for index, (prompt, config) in enumerate(requests)
        if index
    ]
    for index in while_waiting:
        streams[index].cancel()
    queued.set()
    return streams


@pytest.mark.parametrize("drafting", [False, True], ids=["plain", "drafting"])
def test_300_requests_leave_every_block_free_or_cached(tiny: Path, drafting: bool):
    requests = workload(drafting=drafting)
    manifest = Manifest.read(tiny)
    arch, block_size = manifest.architecture, manifest.graphs["paged"].kv.block_size
    block_bytes = 2 * arch.num_layers * arch.num_kv_heads * block_size * arch.head_dim * 4
    budget_blocks = 12  # 768 tokens: a few requests at a time, far below what 8 active could hold
    model = modelverse.load(
        tiny,
        threads=1,
        kv_cache_mode="paged",
        max_active=8,
        max_queued=REQUESTS,
        max_step_tokens=64,
        kv_cache_bytes=budget_blocks * block_bytes,
    )
    engine = model.engine
    streams = submit_in_a_fixed_order(model, requests)
    replies = [[t for d in s for t in d.token_ids] for s in streams]
    engine.check_integrity()
    cache = engine.cache
    pool = cache.pool
    assert pool.num_owned == 0 and pool.num_free + pool.num_cached == pool.num_blocks == budget_blocks
    assert engine.scheduler.num_preemptions > 0 and pool.num_evictions > 0
    reasons = [s.report.finish_reason for s in streams]
    assert set(reasons) <= {"length", "cancelled"} and reasons.count("cancelled") > 0
    assert sum(s.report.cached_tokens for s in streams) > 0
    assert (sum(s.report.accepted_draft_tokens for s in streams) > 0) == drafting
    model.close()

    finished = [i for i, reason in enumerate(reasons) if reason == "length"]
    reference = modelverse.load(tiny, threads=1, max_active=8, max_queued=REQUESTS)
    # The reference decodes plainly: drafted replies must be the same greedy replies.
    plain = GenerationConfig(ignore_eos=True)
    ref_streams = [
        reference.engine.submit(
            requests[i][0], plain.overlay({"max_new_tokens": requests[i][1].max_new_tokens})
        )
        for i in finished
    ]
    expected = [[t for d in s for t in d.token_ids] for s in ref_streams]
    reference.close()
    assert [replies[i] for i in finished] == expected
