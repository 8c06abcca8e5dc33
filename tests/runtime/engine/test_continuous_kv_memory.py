"""The continuous KV cache gives memory back: after long prompts end, their KV pages are released.

Measured on the cache's own memory mappings (``/proc/self/smaps``: the KV
buffers are anonymous mappings of their own), so other allocations of the
process do not blur the figure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clika_runtime import modelverse
from clika_runtime.contract.manifest import Manifest
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.kv.continuous_cache import IDLE_KEEP_POSITIONS
from clika_runtime.engine.kv.kv_cache import RECOMPUTED_TAIL

CONTEXT = 4096
PROMPT = 3000


@pytest.fixture(scope="module")
def long_context_model(make_tiny_hf, tiny_zoo) -> Path:
    _, hf = tiny_zoo.checkpoint(make_tiny_hf, "llama", layers=2, max_position_embeddings=CONTEXT)
    return tiny_zoo.export(hf, verify=False)


def _mappings() -> list[tuple[int, int, int]]:
    """(start, end, resident bytes) of every mapping of this process."""
    found, current = [], None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(part, 16) for part in head.split("-"))
            current = [start, end, 0]
            found.append(current)
        elif head == "Rss:" and current is not None:
            current[2] = int(line.split()[1]) * 1024
    return [tuple(item) for item in found]


def resident_kv_bytes(cache) -> int:
    keys, values = cache.buffers()
    addresses = [buf.ctypes.data for buf in (*keys, *values)]
    held = {(s, e, rss) for s, e, rss in _mappings() if any(s <= a < e for a in addresses)}
    return sum(rss for _, _, rss in held)


def test_long_prompts_give_their_kv_memory_back_when_they_end(long_context_model: Path) -> None:
    model = modelverse.load(long_context_model, threads=1, max_active=4)
    cache = model.engine.cache
    rng = np.random.default_rng(0)
    config = GenerationConfig(max_new_tokens=2, ignore_eos=True)
    prompts = [rng.integers(0, 256, PROMPT).tolist() for _ in range(4)]
    streams = [model.engine.submit(prompt, config) for prompt in prompts]
    for stream in streams:
        stream.result()
    model.engine.check_integrity()
    arch = Manifest.read(long_context_model).architecture
    per_token = 2 * arch.num_layers * arch.num_kv_heads * arch.head_dim * 4
    # Four prompts' KV was written; once idle, one slot's whole prefix stays (a chat's next turn
    # reuses it) and the others' first IDLE_KEEP_POSITIONS, plus a page per buffer row for rounding.
    rows = 2 * arch.num_layers * cache.num_rows * arch.num_kv_heads
    kept = per_token * (PROMPT + 2 + 3 * IDLE_KEEP_POSITIONS) + rows * 4096
    assert resident_kv_bytes(cache) <= kept < 2 * per_token * PROMPT
    # The kept prefix still serves: the same prompt again computes only its last tokens.
    again = model.engine.submit(prompts[-1], config)
    again.result()
    assert again.report.cached_tokens == PROMPT - RECOMPUTED_TAIL
    model.engine.check_integrity()
    model.close()


def test_a_kv_budget_lets_only_what_fits_run_together(long_context_model: Path) -> None:
    arch = Manifest.read(long_context_model).architecture
    per_token = 2 * arch.num_layers * arch.num_kv_heads * arch.head_dim * 4
    config = GenerationConfig(max_new_tokens=8, ignore_eos=True)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 256, 1000).tolist() for _ in range(4)]
    free = modelverse.load(long_context_model, threads=1, max_active=4)
    expected = [free.engine.submit(p, config) for p in prompts]
    expected = [[t for d in s for t in d.token_ids] for s in expected]
    free.close()
    # Room for one request's reservation (prompt + max_new_tokens + the step slack), not two.
    budget = per_token * (1000 + 8 + 256) * 3 // 2
    model = modelverse.load(long_context_model, threads=1, max_active=4, kv_cache_bytes=budget)
    widest = []
    model.set_stage_observer(
        lambda event: widest.append(event.detail["rows"]) if event.stage == "step" else None
    )
    streams = [model.engine.submit(p, config) for p in prompts]
    replies = [[t for d in s for t in d.token_ids] for s in streams]
    model.engine.check_integrity()
    model.close()
    assert replies == expected
    assert max(widest) == 1
