"""Building an engine over an opened model folder: its KV cache, its step runner, its drafter.

``modelverse.GenerativeModel`` builds its one engine here (and any further one
``create_engine`` asks for); an assistant model's engine is built the same way,
without a drafter of its own, and rides the main engine as its drafter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from clika_runtime.contract.manifest import OPTIMUM_BUILDER
from clika_runtime.contract.model_folder import ModelFolder
from clika_runtime.contract.paged_step_graph import PAGED_LAYOUT
from clika_runtime.engine.core import EngineCore, StepRunner
from clika_runtime.engine.engine import Engine, EngineOptions
from clika_runtime.engine.executor import Executor
from clika_runtime.engine.kv.continuous_cache import ContinuousKVCache
from clika_runtime.engine.kv.kv_cache import CacheShape, KVCacheManager
from clika_runtime.engine.kv.paged_cache import PagedKVCache
from clika_runtime.engine.past_kv_runner import PastKVRunner
from clika_runtime.engine.spec_decode.assistant import AssistantDrafter
from clika_runtime.engine.spec_decode.drafting import ASSISTANT
from clika_runtime.text.tokenizer import Tokenizer

if TYPE_CHECKING:
    from clika_runtime.engine.stages import StageObserver
    from clika_runtime.model_facts import Loaded

# A paged cache's default byte budget (SmolLM2-135M: about 23k tokens; Qwen2.5-0.5B: about 44k).
DEFAULT_KV_CACHE_BYTES = 1 << 30
# Slots an assistant's engine keeps at least: beyond the active count they hold finished drafts'
# histories for prefix reuse.
ASSISTANT_SLOTS = 8


def engine_options(base: EngineOptions, limits: Mapping[str, Any]) -> EngineOptions:
    """``base`` (the load's engine limits) with ``limits`` over them."""
    return EngineOptions(**{**base.__dict__, **limits})


def build_engine(
    folder: ModelFolder, tokenizer: Tokenizer, options: EngineOptions, assistant: Engine | None
) -> Engine:
    """An engine over ``folder`` with ``assistant``'s engine (or none) as its drafter: an
    assistant's own engine is built without one, so it never drafts in turn. Its stage
    observer is set on the engine once built (``Engine.observer``)."""
    arch = folder.manifest.architecture
    context_window = folder.manifest.context_window
    cache = new_cache(folder, options)
    executor: StepRunner
    if folder.graph.builder == OPTIMUM_BUILDER:  # a past-KV graph: one call per sequence
        executor = PastKVRunner(
            folder.session, folder.graph, cache, num_layers=arch.num_layers, vocab_size=arch.vocab_size
        )
    else:
        executor = Executor(
            folder.session,
            folder.graph,
            cache,
            num_layers=arch.num_layers,
            vocab_size=arch.vocab_size,
            context_window=context_window,
        )
    core = EngineCore(
        executor,
        cache,
        tokenizer,
        max_seq=context_window,
        vocab_size=arch.vocab_size,
        eos_token_ids=tokenizer.eos_token_ids,
        options=options,
        drafters=None if assistant is None else {ASSISTANT: AssistantDrafter(assistant)},
    )
    return Engine(core)


def model_engine(
    main: Loaded, assistant: Loaded | None, limits: Mapping[str, Any], observer: StageObserver | None
) -> Engine:
    """A loaded model's engine: its load's limits with ``limits`` over them, the ``assistant``
    load's engine (or none) as its drafter, ``observer`` watching its stages."""
    options = engine_options(main.options, limits)
    drafter = None
    if assistant is not None:
        helper_options = assistant_options(assistant.options, options)
        drafter = build_engine(assistant.folder, assistant.tokenizer, helper_options, None)
    engine = build_engine(main.folder, main.tokenizer, options, drafter)
    engine.observer = observer
    return engine


def assistant_options(base: EngineOptions, main: EngineOptions) -> EngineOptions:
    """An assistant engine's limits: its load's, with slots for every request ``main`` decodes."""
    return engine_options(base, {"max_active": max(main.max_active, ASSISTANT_SLOTS)})


def new_cache(folder: ModelFolder, options: EngineOptions) -> KVCacheManager:
    """The KV cache ``folder``'s KV mode asks for, sized by ``options``."""
    arch = folder.manifest.architecture
    kv = folder.graph.kv
    max_seq = folder.manifest.context_window
    shape = CacheShape(arch.num_layers, arch.num_kv_heads, arch.head_dim, kv.dtype)
    if folder.kv_mode == "paged":
        if kv.layout != PAGED_LAYOUT or not kv.block_size:
            raise ValueError(
                f"the paged graph of {folder.path.name} has KV layout {kv.layout!r} and block size "
                f"{kv.block_size}; this runtime reads layout {PAGED_LAYOUT!r}: export the model again"
            )
        return PagedKVCache(
            shape,
            block_size=kv.block_size,
            max_bytes=options.kv_cache_bytes or DEFAULT_KV_CACHE_BYTES,
            num_slots=options.max_active,
            max_seq=max_seq,
            prefix_reuse=options.prefix_reuse,
        )
    return ContinuousKVCache(
        shape,
        num_slots=options.max_active,
        max_seq=max_seq,
        slack=options.max_step_tokens,
        prefix_reuse=options.prefix_reuse,
        max_bytes=options.kv_cache_bytes,
    )
