"""A synchronous engine core on an exported folder, for media tests that decide what each step runs."""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort

from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_model_folder, open_session
from clika_runtime.contract.step_graph import MediaSpan, pack_media, pack_mrope, pack_step
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.core import EngineCore
from clika_runtime.engine.executor import Executor
from clika_runtime.engine.kv.continuous_cache import ContinuousKVCache
from clika_runtime.engine.kv.kv_cache import CacheShape
from clika_runtime.engine.kv.paged_cache import PagedKVCache
from clika_runtime.engine.options import EngineOptions
from clika_runtime.engine.sequence import Request, Sequence
from clika_runtime.engine.step_plan import StepPlan


class Collected:
    """A reply sink keeping the tokens and the report."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.report = None

    def put(self, delta) -> None:
        self.tokens.extend(delta.token_ids)

    def end(self, report) -> None:
        self.report = report


def greedy(max_new_tokens: int) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=True)


def engine_core(folder, mode: str, *, kv_dtype: str = "float32", max_step_tokens: int = 48) -> EngineCore:
    """An engine core on the folder's ``mode`` graph with a ``kv_dtype`` cache (4 slots)."""
    opened = open_model_folder(folder, kv_mode=mode, kv_dtype=kv_dtype, threads=1)
    arch = opened.manifest.architecture
    shape = CacheShape(arch.num_layers, arch.num_kv_heads, arch.head_dim, opened.graph.kv.dtype)
    window = opened.manifest.context_window
    if mode == "paged":
        cache = PagedKVCache(
            shape, block_size=opened.graph.kv.block_size, max_bytes=1 << 26, num_slots=4, max_seq=window
        )
    else:
        cache = ContinuousKVCache(shape, num_slots=4, max_seq=window, slack=max_step_tokens)
    executor = Executor(
        opened.session, opened.graph, cache, num_layers=arch.num_layers, vocab_size=arch.vocab_size,
        context_window=window,
    )  # fmt: skip
    options = EngineOptions(max_active=4, max_step_tokens=max_step_tokens)
    return EngineCore(
        executor, cache, opened.tokenizer, max_seq=window, vocab_size=arch.vocab_size, options=options
    )


_ids = itertools.count(1)


def submit(core: EngineCore, ids, media, new_tokens: int) -> tuple[Sequence, Collected]:
    prompt = core.check_request(ids, greedy(new_tokens), media)
    sink = Collected()
    seq = core.add(Sequence(Request(next(_ids), prompt, greedy(new_tokens), media=media)), sink)
    return seq, sink


def run(core: EngineCore) -> list[StepPlan]:
    """Step until the core is idle, checking its KV bookkeeping after each step."""
    plans = []
    while core.has_work:
        plan = core.step()
        core.check_integrity()
        if plan is not None:
            plans.append(plan)
    return plans


def run_beside_text(core: EngineCore, text_ids, ids, media, new_tokens: int) -> tuple[Collected, Collected]:
    """A text request and then the media prompt ``ids`` run to the end: (text sink, media sink).

    Asserts what the media checks rely on: the two ran batched in one step, and the
    media prompt came in more than two chunks.
    """
    text_seq, text_sink = submit(core, text_ids, None, new_tokens)
    media_seq, media_sink = submit(core, ids, media, new_tokens)
    plans = run(core)
    pair = {text_seq.request_id, media_seq.request_id}
    assert any({r.seq.request_id for r in p.rows} == pair for p in plans)  # batched beside the text
    assert len([r for p in plans for r in p.rows if r.seq is media_seq and r.start < len(ids)]) > 2
    return text_sink, media_sink


def first_logits(folder, ids: list[int], media) -> np.ndarray:
    """The continuous graph's logits after the whole prompt ``ids`` with ``media`` in one step.

    The graph runs directly (no engine) on an empty cache; media with rotary
    positions (M-RoPE) feed them too.
    """
    manifest = Manifest.read(folder)
    graph, arch = manifest.graphs["continuous"], manifest.architecture
    session = open_session(folder / graph.file, ort.SessionOptions(), manifest.rope_tables)
    kv = {
        name.format(layer=layer): np.zeros((1, arch.num_kv_heads, len(ids) + 1, arch.head_dim), np.float32)
        for layer in range(arch.num_layers)
        for name in (graph.kv.past_key, graph.kv.past_value)
    }
    feeds = {
        **pack_step([(0, ids, False)]).feeds(),
        **pack_media([(MediaSpan(media.positions, media.embeds), 0, len(ids))], arch.hidden_size),
        **kv,
    }
    if media.rope is not None:
        feeds.update(pack_mrope([(media.rope, 0, len(ids))]))
    (logits,) = session.run([graph.logits_output], feeds)
    return logits[0]
