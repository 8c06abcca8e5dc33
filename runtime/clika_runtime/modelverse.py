"""The public API: ``load`` a model folder, then generate with ``GenerativeModel``.

::

    from clika_runtime import modelverse

    model = modelverse.load("path/to/model-folder")
    print(model.generate("Name three colors.", max_new_tokens=32))
    for piece in model.stream_generate("Tell me a story.", temperature=0.7, seed=1):
        print(piece, end="", flush=True)
    replies = model.generate_batch(["Hi!", "What is 2+2?"])  # decoded together

Every request runs on the model's ONE engine (built on the first request,
reused after): ``generate`` joins ``stream_generate``'s pieces, which drain the
engine's stream for the request; ``generate_batch`` submits every prompt before
reading any reply so they decode together; ``chat``, every ``chat_session()``,
every ``AsyncChat`` and the server submit their turns to the same engine, so
they share its KV cache, its prefix cache, its limits and its stage observer.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clika_runtime.chat.media_turns import (
    attach_audio,
    attach_images,
    refuse_media,
    split_audio,
    split_images,
    with_audio_on_last_user_turn,
    with_images_on_last_user_turn,
)
from clika_runtime.chat.model import reasoning_mode, supports_tools
from clika_runtime.chat.outcome import ChatOutcome
from clika_runtime.chat.render import render_prompt
from clika_runtime.chat.session import ChatSession
from clika_runtime.chat.templates import ChatTemplate
from clika_runtime.chat.tools import ToolCall
from clika_runtime.embedding.embedder import Embedder, open_embedder
from clika_runtime.engine.config import GenerationConfig, config_from_checkpoint
from clika_runtime.engine.core import StepRunner
from clika_runtime.engine.engine import Engine, EngineOptions, RequestStream
from clika_runtime.engine.errors import GenerationError
from clika_runtime.engine.executor import Executor
from clika_runtime.engine.kv.kv_cache import CacheShape, ContinuousKVCache, KVCacheManager
from clika_runtime.engine.kv.paged_cache import PagedKVCache
from clika_runtime.engine.past_kv_runner import PastKVRunner
from clika_runtime.engine.prompt_media import PromptMedia
from clika_runtime.engine.report import GenerationReport
from clika_runtime.engine.spec_decode.assistant import DEFAULT_ASSISTANT_TOKENS, AssistantDrafter
from clika_runtime.engine.spec_decode.drafting import ASSISTANT
from clika_runtime.engine.stages import StageEvent, StageObserver
from clika_runtime.manifest import OPTIMUM_BUILDER
from clika_runtime.media.arguments import VideoInput
from clika_runtime.media.audio_prompts import AudioPrompts
from clika_runtime.media.image_prompts import ImagePrompts
from clika_runtime.model_folder import ModelFolder, kv_identity, open_model_folder
from clika_runtime.paged_step_graph import PAGED_LAYOUT
from clika_runtime.step_graph import takes_media
from clika_runtime.store.load_target import folder_to_load
from clika_runtime.text.tokenizer import Tokenizer

__all__ = [
    "ChatOutcome",
    "ChatSession",
    "GenerationConfig",
    "GenerationReport",
    "GenerativeModel",
    "StageEvent",
    "ToolCall",
    "load",
]

KV_CACHE_MODES = ("continuous", "paged")
# What ``compute_dtype`` reads when the checkpoint's own dtype applies (the seed's word for it).
UNDEFINED_DTYPE = "Undefined"
# A paged cache's default byte budget (SmolLM2-135M: about 23k tokens; Qwen2.5-0.5B: about 44k).
DEFAULT_KV_CACHE_BYTES = 1 << 30


@dataclass
class _Loaded:
    """What ``load`` opened: the folder (manifest, ORT session), tokenizer, template and engine limits."""

    folder: ModelFolder
    tokenizer: Tokenizer
    template: ChatTemplate | None
    kv_cache_mode: str | None
    options: EngineOptions
    threads: int | None = None  # the load's ORT threads (a vision graph opens with them too)

    @property
    def residency(self) -> dict[str, Any]:
        """Bytes of weights the load left on each device (all on the CPU)."""
        # The paged graph reads the continuous graph's weights file: count that one.
        graph = self.folder.manifest.graphs.get("continuous", self.folder.graph)
        graph_file = self.folder.path / graph.file
        weights = sum(p.stat().st_size for p in graph_file.parent.glob(graph_file.name + "*"))
        return {"cpu": {"weights_bytes": weights}}


def load(
    folder: str | Path,
    *,
    threads: int | None = None,
    kv_cache_mode: str | None = None,
    max_active: int | None = None,
    max_queued: int = 256,
    max_step_tokens: int = 256,
    prefix_reuse: bool = True,
    allow_spinning: bool = True,
    kv_cache_bytes: int | None = None,
    kv_cache_dtype: str = "float32",
    assistant_model: GenerativeModel | str | Path | None = None,
) -> GenerativeModel:
    """Open an exported model folder, or the model a catalog name, ``hf://`` spec or checkpoint names.

    A name, spec or checkpoint resolves through the model store
    (``clika_runtime.store``): exported at int4 once, on first use, when the
    export extra is installed (``ModelError`` naming what to install otherwise).

    ``threads`` sets ONNX Runtime's intra-op threads (None: one per core);
    ``max_active`` how many requests decode together (None: one, grown by
    ``generate_batch``); ``max_queued`` how many more may wait;
    ``max_step_tokens`` the most tokens one step computes (longer prompts run
    in chunks between the other requests' decode steps).

    ``kv_cache_mode``: "continuous" (the default) gives each active request
    one slot of the whole context (memory committed as tokens are written and
    given back when the model goes idle; ``kv_cache_bytes`` caps what the
    running requests may reserve, default no cap); "paged" keeps KV in fixed-size blocks
    that grow with the tokens held, up to ``kv_cache_bytes`` (default 1 GiB),
    shares cached prefixes block by block between requests and preempts
    (then recomputes) a request when memory runs out. ``prefix_reuse``
    switches the prefix cache of either mode.

    ``allow_spinning``: ORT's worker threads busy-wait between the operators of
    a step (faster) and sleep between steps; False makes them sleep always.

    ``kv_cache_dtype``: "float32" (the default) or "int8", a quarter of the KV
    memory for a small loss of quality (scales calibrated at export; either KV
    mode), like llama.cpp's ``--cache-type-k q8_0``.

    ``assistant_model``: a loaded model or a model folder (loaded here, with the
    same threads, and closed with this model) attached with :meth:`set_assistant`.
    """
    if kv_cache_mode not in (None, *KV_CACHE_MODES):
        raise ValueError(f"kv_cache_mode must be one of {KV_CACHE_MODES} or None, got {kv_cache_mode!r}")
    options = EngineOptions(
        max_active=1 if max_active is None else max_active,
        max_queued=max_queued,
        max_step_tokens=max_step_tokens,
        prefix_reuse=prefix_reuse,
        kv_cache_bytes=kv_cache_bytes,
    )
    mode = kv_cache_mode or "continuous"
    folder = folder_to_load(folder)
    opened = open_model_folder(
        folder, kv_mode=mode, kv_dtype=kv_cache_dtype, threads=threads, allow_spinning=allow_spinning
    )
    spec = opened.manifest.tokenizer
    tokenizer = Tokenizer(
        opened.tokenizer,
        bos_token_id=spec.bos_token_id,
        eos_token_ids=spec.eos_token_ids,
        pad_token_id=spec.pad_token_id,
        add_bos_token=spec.add_bos_token,
        bos_token=spec.bos_token,
        eos_token=spec.eos_token,
    )
    template = None
    if opened.chat_template:
        specials = {
            k: v for k, v in (("bos_token", tokenizer.bos_token), ("eos_token", tokenizer.eos_token)) if v
        }
        # Probed now, so serving never waits on a render to describe the model.
        template = ChatTemplate(opened.chat_template, special_tokens=specials).probe()
    # The paged graph rotates a step's packed tokens in one RotaryEmbedding, which ONNX Runtime
    # refuses when they outnumber its cos/sin table (the context window): a step never packs more.
    step_tokens = min(options.max_step_tokens, opened.manifest.context_window)
    options = dataclasses.replace(options, max_step_tokens=step_tokens)
    model = GenerativeModel(_Loaded(opened, tokenizer, template, kv_cache_mode, options, threads))
    if isinstance(assistant_model, (str, Path)):
        assistant_model = load(assistant_model, threads=threads, allow_spinning=allow_spinning)
        model._owned_assistant = assistant_model
    if assistant_model is not None:
        model.set_assistant(assistant_model)
    return model


class GenerativeModel:
    """A loaded text-generation model.

    ``generate`` returns the reply to one prompt (or to a conversation passed
    as ``messages``); ``stream_generate`` yields the reply piece by piece as
    the model produces it. Decode knobs ride keyword arguments over the
    checkpoint's defaults (``max_new_tokens``, ``temperature``, ``top_p``, ...;
    see :class:`GenerationConfig`). ``report`` holds how the last generation
    ended.
    """

    def __init__(self, handle: Any) -> None:
        self._handle: _Loaded = handle
        manifest = handle.folder.manifest
        self._defaults = config_from_checkpoint(manifest.generation_defaults)
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()
        self._observer: StageObserver | None = None
        self._report_lock = threading.Lock()  # several threads may generate at once
        self._report: GenerationReport | ChatOutcome | None = None
        self._reports: list[ChatOutcome] = []
        self._assistant: GenerativeModel | None = None
        self._owned_assistant: GenerativeModel | None = None  # loaded by ``load``: closed with this model
        self._embedder: Embedder | None = None
        vision = manifest.vision
        # A vision graph is of use only when the step graph takes its embeddings.
        self._images = (
            None
            if vision is None or not takes_media(handle.folder.graph.inputs)
            else ImagePrompts(
                handle.folder.path,
                vision,
                handle.tokenizer,
                threads=handle.threads,
                observer=lambda: self._observer,
            )
        )
        self._audio = (
            None
            if manifest.audio is None or not takes_media(handle.folder.graph.inputs)
            else AudioPrompts(
                handle.folder.path,
                manifest.audio,
                handle.tokenizer,
                threads=handle.threads,
                observer=lambda: self._observer,
            )
        )
        self._kv_key: str | None = None

    # -- what the model is -------------------------------------------------------------

    @property
    def defaults(self) -> GenerationConfig:
        """The checkpoint's decode defaults; with an assistant attached, greedy requests draft with it
        (``num_assistant_tokens``, as llama.cpp does with ``-md``; 0 opts a request out)."""
        if self._assistant is not None and not self._defaults.num_assistant_tokens:
            return self._defaults.overlay({"num_assistant_tokens": DEFAULT_ASSISTANT_TOKENS})
        return self._defaults

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The ids that end a sequence."""
        return self._handle.tokenizer.eos_token_ids

    @property
    def max_seq(self) -> int:
        """The context window in tokens."""
        return self._handle.folder.manifest.context_window

    @property
    def vocab_size(self) -> int:
        return self._handle.folder.manifest.architecture.vocab_size

    @property
    def tokenizer(self) -> Tokenizer:
        """The checkpoint's tokenizer (a clika_runtime tokenizer)."""
        return self._handle.tokenizer

    @property
    def local_dir(self) -> Path:
        """The model folder the model loaded from."""
        return self._handle.folder.path

    @property
    def compute_dtype(self) -> str:
        """The dtype the model computes at: "Undefined", the checkpoint's own applies (a load
        names no other)."""
        return UNDEFINED_DTYPE

    @property
    def has_chat_template(self) -> bool:
        """True when the tokenizer ships a chat template."""
        return self._handle.template is not None

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self._handle.template

    @property
    def kv_cache_mode(self) -> str | None:
        """The KV-cache storage the load named ("paged" or "continuous"); None when it named none."""
        return self._handle.kv_cache_mode

    @property
    def kv_cache_dtype(self) -> str:
        """The KV cache's element type ("float32" or "int8")."""
        return self._handle.folder.graph.kv.dtype

    @property
    def kv_key(self) -> str:
        """What saved KV must name to be read by this model (``model_folder.kv_identity``)."""
        if self._kv_key is None:
            self._kv_key = kv_identity(self._handle.folder)
        return self._kv_key

    @property
    def residency(self) -> dict[str, Any]:
        """The weights on each device plus the ``pipeline`` part, the KV cache the engine built."""
        engine = self._engine
        usage = (
            engine.cache.usage() if engine is not None else {"kv_cache_bytes": 0, "slots": 0, "capacity": 0}
        )
        pipeline = {
            "kv_cache_mode": self.kv_cache_mode or "continuous",
            "kv_cache_dtype": self.kv_cache_dtype,
            **usage,
        }
        return {**self._handle.residency, "pipeline": pipeline}

    @property
    def report(self) -> GenerationReport | ChatOutcome | None:
        """How the last generation ended, or None before the first one."""
        return self._report

    @property
    def reports(self) -> list[ChatOutcome]:
        """How each reply of the last :meth:`generate_batch` ended, in prompt order."""
        return list(self._reports)

    @property
    def assistant_model(self) -> GenerativeModel | None:
        """The attached assistant model, or None."""
        return self._assistant

    @property
    def supports_tools(self) -> bool:
        """True when the chat template takes tool definitions."""
        return supports_tools(self._handle.template)

    @property
    def template_renders_tools(self) -> bool:
        """True when the chat template itself renders offered tools into the prompt."""
        return self._handle.template is not None and self._handle.template.renders_tools

    @property
    def tool_call_format(self) -> str | None:
        """The format the model's tool calls are read with, probed from the chat template."""
        return self._handle.template.tool_call_format if self._handle.template is not None else None

    @property
    def reasoning_mode(self) -> str:
        """How the reasoning channel behaves ("never", "always", "toggleable", "opt_in", "adaptive")."""
        return reasoning_mode(self._handle.template)

    @property
    def supports_thinking(self) -> bool:
        """True when the model produces a reasoning channel (``reasoning_mode`` says how)."""
        return self.reasoning_mode != "never"

    @property
    def supports_speculative_decoding(self) -> bool:
        """True: requests may draft by prompt lookup (``prompt_lookup_num_tokens=``); both KV cache
        modes score every position of a step's row and keep the whole history."""
        return True

    @property
    def kernels(self) -> str:
        """How the step graph's GgufMatMul nodes run: the kernel library and its ISA, or the
        MatMulNBits rewrite and why (``clika_runtime.kernels.graph_loading``)."""
        path = getattr(self._handle.folder.session, "kernel_path", None)
        return path.describe() if path is not None else "none (the graph has no GgufMatMul)"

    @property
    def supports_vision(self) -> bool:
        """True when the folder has a vision graph: ``images=`` ride the user turn."""
        return self._images is not None

    def encode_with_images(
        self, text: str, images: Sequence[Any], *, request_id: int | None = None
    ) -> tuple[list[int], PromptMedia | None]:
        """``text`` (one image marker per image, where the chat template put them) as token ids with
        each marker expanded to its image's tokens, and the images' embeddings (the ``vision`` stage)."""
        if self._images is None:
            raise ValueError("this model reads text only; it takes no images")
        return self._images.encode(text, images, token_budget=self.max_seq - 1, request_id=request_id)

    @property
    def supports_audio(self) -> bool:
        """True when the folder has an audio graph: ``audio=`` ([S] float mono at 16 kHz) ride the user turn."""
        return self._audio is not None

    @property
    def audio_sampling_rate(self) -> int | None:
        """The rate ``audio=`` samples are read at (Hz; None for a model without audio)."""
        return None if self._audio is None else self._audio.sampling_rate

    def encode_with_audio(
        self, text: str, audio: Sequence[Any], *, request_id: int | None = None
    ) -> tuple[list[int], PromptMedia | None]:
        """``text`` (one ``<|AUDIO|>`` marker per clip, where the chat template put them) as token ids
        with each marker expanded to its clip's tokens, and the clips' embeddings (the ``audio`` stage)."""
        if self._audio is None:
            raise ValueError("this model takes no audio")
        return self._audio.encode(text, audio, token_budget=self.max_seq - 1, request_id=request_id)

    @property
    def supports_video(self) -> bool:
        """True when the checkpoint reads videos through its vision graph (SmolVLM2's
        ``video_sampling``): ``videos=`` ((frames, timestamps) pairs) ride the user turn."""
        return self._images is not None and self._images.reads_video

    # -- embeddings -------------------------------------------------------------------

    @property
    def embedder(self) -> Embedder:
        """Embeds on the model's own session beside its engine (an ``EmbeddingError`` names why not)."""
        with self._engine_lock:
            if self._embedder is None:
                self._embedder = open_embedder(self._handle.folder, self._handle.tokenizer)
            return self._embedder

    def embed(
        self,
        inputs: str | Sequence[str | Sequence[int]],
        *,
        dimensions: int | None = None,
        truncate: bool = False,
    ) -> np.ndarray:
        """Embedding vectors of ``inputs``: a text gives ``[D]``, a list of texts or token-id lists ``[N, D]``.

        Each vector is the final hidden states pooled as the checkpoint asks (its
        sentence-transformers Pooling config or GGUF ``pooling_type``: the last
        token for Qwen3-Embedding-style models; mean otherwise), L2-normalized;
        ``dimensions`` keeps the first components and normalizes again. An input
        longer than the context window is an ``EmbeddingError`` unless ``truncate``.
        Safe beside generation on any thread: each call runs its own scratch KV.
        """
        single = isinstance(inputs, str)
        vectors = self.embedder.embed(
            [inputs] if single else inputs, dimensions=dimensions, truncate=truncate
        )
        return vectors.vectors[0] if single else vectors.vectors

    def set_assistant(self, model: GenerativeModel | None) -> None:
        """Attach ``model`` as this model's assistant (assisted generation); None detaches.

        It must share this model's vocabulary and have a context window at least
        this one's (refused otherwise, naming the mismatch). A greedy request's
        ``num_assistant_tokens`` then drafts that many tokens a step with it
        (fewer after refused guesses; the model's ``defaults`` draft
        ``DEFAULT_ASSISTANT_TOKENS``, ``num_assistant_tokens=0`` opts out); its
        report carries the tally. Set it before the first generation.
        """
        if model is not None:
            _check_assistant(self, model)
        with self._engine_lock:
            if self._engine is not None:
                raise ValueError(
                    "set the assistant before the first generation: this model's engine is running"
                )
            self._assistant = model

    def set_stage_observer(self, callback: StageObserver | None) -> None:
        """Report every request's stages (tokenize, prefill, decode, detokenize, and each engine step)
        to ``callback``, called on the stage's own thread; it must return at once."""
        self._observer = callback
        if self._engine is not None:
            self._engine.observer = callback

    # -- engines ------------------------------------------------------------------------

    def create_engine(self, *, observer: StageObserver | None = None, **limits: Any) -> Engine:
        """A new serving engine over this model (its own KV cache and thread; the ORT session is shared).

        ``limits`` override the load's ``max_active``, ``max_queued``,
        ``max_step_tokens``, ``prefix_reuse`` and ``kv_cache_bytes``.
        """
        options = self._engine_options(limits)
        assistant = None
        if self._assistant is not None:
            helper = self._assistant
            # Slots beyond the active count keep finished drafts' histories for prefix reuse.
            limits = {"max_active": max(options.max_active, 8)}
            assistant = AssistantDrafter(helper._build_engine(helper._engine_options(limits)))
        return self._build_engine(options, observer=observer, assistant=assistant)

    def _engine_options(self, limits: Mapping[str, Any]) -> EngineOptions:
        """The load's engine limits with ``limits`` over them."""
        return EngineOptions(**{**self._handle.options.__dict__, **limits})

    def _build_engine(
        self,
        options: EngineOptions,
        *,
        observer: StageObserver | None = None,
        assistant: AssistantDrafter | None = None,
    ) -> Engine:
        """An engine with ``assistant`` (or none) as its drafter: an assistant's own engine is built
        without one, so it never drafts in turn, even when it is the model itself."""
        folder = self._handle.folder
        arch = folder.manifest.architecture
        cache = self._new_cache(options)
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
                context_window=self.max_seq,
            )
        return Engine(
            executor,
            cache,
            self.tokenizer,
            max_seq=self.max_seq,
            vocab_size=arch.vocab_size,
            eos_token_ids=self.eos_token_ids,
            options=options,
            observer=observer,
            drafters=None if assistant is None else {ASSISTANT: assistant},
        )

    def _new_cache(self, options: EngineOptions) -> KVCacheManager:
        folder = self._handle.folder
        arch = folder.manifest.architecture
        shape = CacheShape(arch.num_layers, arch.num_kv_heads, arch.head_dim, folder.graph.kv.dtype)
        if folder.kv_mode == "paged":
            kv = folder.graph.kv
            if kv.layout != PAGED_LAYOUT or not kv.block_size:
                raise ValueError(
                    f"the paged graph of {folder.path.name} has KV layout {kv.layout!r} and block size "
                    f"{kv.block_size}; this runtime reads layout {PAGED_LAYOUT!r}: export the model again"
                )
            return PagedKVCache(
                shape,
                block_size=folder.graph.kv.block_size,
                max_bytes=options.kv_cache_bytes or DEFAULT_KV_CACHE_BYTES,
                num_slots=options.max_active,
                max_seq=self.max_seq,
                prefix_reuse=options.prefix_reuse,
            )
        return ContinuousKVCache(
            shape,
            num_slots=options.max_active,
            max_seq=self.max_seq,
            slack=options.max_step_tokens,
            prefix_reuse=options.prefix_reuse,
            max_bytes=options.kv_cache_bytes,
        )

    @property
    def engine(self) -> Engine:
        """The model's engine, shared by every front end (built on first use with the load's limits)."""
        with self._engine_lock:
            if self._engine is None:
                self._engine = self.create_engine(observer=self._observer)
            return self._engine

    def raise_limits(self, *, max_active: int | None = None, max_queued: int | None = None) -> None:
        """Let the model's engine decode ``max_active`` requests together and queue ``max_queued``
        beyond them, when those exceed its limits (the load sets them; nothing here lowers them)."""
        self.engine.raise_limits(max_active=max_active, max_queued=max_queued)

    def close(self) -> None:
        """Stop the model's engine (a later request builds a new one)."""
        with self._engine_lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        if self._owned_assistant is not None:
            self._owned_assistant.close()

    # -- prompts ------------------------------------------------------------------------

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> str:
        """The prompt text the chat template renders for ``messages`` (``tools`` offered; a policy's
        ``enable_thinking`` / ``reasoning_effort`` fold into the template's variables)."""
        policy = GenerationConfig.resolve(self.defaults, config, overrides)
        return render_prompt(
            self._handle.template, messages, policy, add_generation_prompt=add_generation_prompt, tools=tools
        )

    def conversation_text(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The text the model reads for a conversation: the chat template's rendering, else
        ``role: content`` lines with the assistant's turn opened."""
        return self.render(messages)

    def _prompt_with_images(
        self, prompt: Any, messages: Any, config: GenerationConfig, images: list[Any]
    ) -> tuple[str, list[Any]]:
        """The prompt text (an image marker where each image rides) and the images in prompt order."""
        if messages is not None:
            rendered, images = split_images(messages)
            return self._prompt_text(None, rendered, config), images
        if not images:
            return self._prompt_text(prompt, None, config), []
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
        stills = [item for item in images if not isinstance(item, VideoInput)]
        clips = [item.pair for item in images if isinstance(item, VideoInput)]
        if self._handle.template is None:  # raw text: the markers lead, unless the prompt places them
            assert self._images is not None
            marker = self._images.marker
            video_marker = self._images.video_marker
            if clips and video_marker not in prompt:
                prompt = video_marker * len(clips) + prompt
            return (prompt if marker in prompt else marker * len(stills) + prompt), images
        turn = attach_images({"role": "user", "content": prompt}, stills, clips)
        rendered, images = split_images([turn])
        return self.render(rendered, config=config), images

    def _prompt_with_media(
        self, prompt: Any, messages: Any, config: GenerationConfig, images: list[Any], audio: list[Any]
    ) -> tuple[str, list[Any], list[Any]]:
        """The prompt text (a marker where each item rides), the images and the clips in prompt order."""
        if images and audio:
            raise ValueError("a prompt takes images or audio, not both")
        if not audio and (messages is None or not _has_audio(messages)):
            return (*self._prompt_with_images(prompt, messages, config, images), [])
        if messages is not None:
            rendered, audio = split_audio(messages)
            text, images = self._prompt_with_images(None, rendered, config, images)
            return text, images, audio
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
        if self._handle.template is None:  # raw text: the clips lead, unless the prompt places them
            assert self._audio is not None
            lead = "" if self._audio.marker in prompt else self._audio.clip_text * len(audio)
            return lead + prompt, [], audio
        rendered, audio = split_audio([attach_audio({"role": "user", "content": prompt}, audio)])
        return self.render(rendered, config=config), [], audio

    def _prompt_text(self, prompt: Any, messages: Any, config: GenerationConfig) -> str:
        if (prompt is None) == (messages is None):
            raise ValueError("pass either a prompt or messages= (exactly one of them)")
        if messages is not None:
            return self.render(messages, config=config)
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
        if self._handle.template is None:
            return prompt
        return self.render([{"role": "user", "content": prompt}], config=config)

    # -- generation ---------------------------------------------------------------------

    def _config(self, config: Any, overrides: Mapping[str, Any]) -> GenerationConfig:
        return GenerationConfig.resolve(self.defaults, config, overrides)

    def _submit(
        self,
        text: str,
        config: GenerationConfig,
        *,
        skip_special_tokens: bool = True,
        detokenize: bool = True,
        images: Sequence[Any] = (),
        audio: Sequence[Any] = (),
    ) -> RequestStream:
        engine = self.engine
        request_id = engine.new_request_id()
        media = None
        if images and audio:
            raise ValueError("a prompt takes images or audio, not both")
        if images:
            ids, media = self.encode_with_images(text, images, request_id=request_id)
        elif audio:
            ids, media = self.encode_with_audio(text, audio, request_id=request_id)
        else:
            began = time.perf_counter()
            ids = self.tokenizer.encode(text)
            if self._observer is not None:
                self._observer(StageEvent("tokenize", request_id, time.perf_counter() - began, len(ids)))
        return engine.submit(
            ids,
            config,
            request_id=request_id,
            skip_special_tokens=skip_special_tokens,
            detokenize=detokenize,
            media=media,
        )

    def generate(
        self,
        prompt: str | Sequence[str] | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        images: Sequence[Any] = (),
        audio: Sequence[Any] = (),
        videos: Sequence[Any] = (),
        max_active: int | None = None,
        **overrides: Any,
    ) -> str | list[str]:
        """Generate the reply to ``prompt`` (one user message), to ``messages`` (a conversation), or to
        a list of prompts (one reply each, decoded together: see :meth:`generate_batch`).

        A model with a chat template gets it applied; one without reads the
        prompt as raw text. Keyword arguments overlay the checkpoint's decode
        defaults; ``report`` afterwards says how the reply ended.
        """
        if isinstance(prompt, (list, tuple)):
            if messages is not None:
                raise ValueError("pass either a list of prompts or messages=, not both")
            if any(not isinstance(given, Sequence) or len(given) for given in (images, audio, videos)):
                raise ValueError("images, audio and videos ride one prompt: pass a single prompt, not a list")
            return self.generate_batch(prompt, config=config, max_active=max_active, **overrides)
        pieces = self.stream_generate(
            prompt, messages=messages, config=config, images=images, audio=audio, videos=videos, **overrides
        )
        return "".join(pieces)  # a failed step raises GenerationError from the iterator

    def stream_generate(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        images: Sequence[Any] = (),
        audio: Sequence[Any] = (),
        videos: Sequence[Any] = (),
        skip_special_tokens: bool = True,
        decode: bool = True,
        **overrides: Any,
    ) -> Iterator[str] | Iterator[list[int]]:
        """Generate as ``generate`` does, yielding the reply as the model produces it: text pieces,
        or with ``decode=False`` the token ids, one list per batch the engine handed over.

        A piece never splits a character and never shows a stop string.
        Closing the iterator early (or dropping it) stops delivery; the
        generation itself runs to completion, and ``report`` is set once the
        reply is complete (to this request's report, whichever thread reads
        it). ``cancel()`` on the iterator stops the generation itself at the
        next step, for a caller who wants the compute back.
        """
        if prompt is not None and messages is not None:
            raise ValueError("pass either a prompt or messages= (exactly one of them), not both")
        refuse_media(
            images,
            audio,
            videos,
            vision=self.supports_vision,
            video=self.supports_video,
            hearing=self.supports_audio,
        )
        cfg = self._config(config, overrides)
        if messages is not None and (images or videos):
            messages = with_images_on_last_user_turn(messages, images, videos)
        if messages is not None and audio:
            messages = with_audio_on_last_user_turn(messages, audio)
        media = [*images, *(VideoInput(video) for video in videos)]  # a turn's images, then its videos
        text, images, audio = self._prompt_with_media(prompt, messages, cfg, media, list(audio))
        stream = self._submit(
            text, cfg, skip_special_tokens=skip_special_tokens, detokenize=decode, images=images, audio=audio
        )
        pieces = stream.texts() if decode else stream.token_batches()
        return _StreamedReply(stream, pieces, self._set_report)

    def _set_report(self, report: GenerationReport | ChatOutcome | None) -> None:
        with self._report_lock:
            self._report = report

    def generate_batch(
        self,
        prompts: Sequence[str],
        *,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        max_active: int | None = None,
        **overrides: Any,
    ) -> list[str]:
        """Generate one reply per prompt, the prompts decoding TOGETHER.

        Every prompt is submitted to the model's engine before any reply is
        read, so each step serves every prompt still generating. The model's
        engine is set to decode all of them at once, or ``max_active`` of them
        (the rest wait and join as others finish). Replies come back in prompt
        order; ``reports`` holds one :class:`ChatOutcome` per prompt.
        """
        if isinstance(prompts, str):
            raise ValueError("generate_batch takes a list of prompts; use generate for one prompt")
        cfg = self._config(config, overrides)
        texts = [self._prompt_text(p, None, cfg) for p in prompts]
        if not texts:
            self._reports = []
            return []
        engine = self.engine
        if max_active is None:  # every prompt at once; never lowers what the engine allows
            engine.raise_limits(max_active=len(texts))
        else:
            engine.set_max_active(max_active)
        streams: list[RequestStream] = []
        try:
            for text in texts:
                streams.append(self._submit(text, cfg))
        except BaseException:
            for stream in streams:
                stream.cancel()
            raise
        replies = [stream.result() for stream in streams]
        reports = [ChatOutcome(text, stream.report) for text, stream in zip(replies, streams, strict=True)]  # type: ignore[arg-type]
        with self._report_lock:
            self._reports = reports
            self._report = reports[-1]
        failed = [
            i for i, stream in enumerate(streams) if stream.report and stream.report.finish_reason == "error"
        ]
        if failed:
            report = streams[failed[0]].report
            raise GenerationError(
                f"prompt {failed[0]}: the model failed while generating: {report.error}", report
            )
        return replies

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        stream: bool = False,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        images: Sequence[Any] = (),
        audio: Sequence[Any] = (),
        videos: Sequence[Any] = (),
        tools: Sequence[Mapping[str, Any]] | None = None,
        **overrides: Any,
    ) -> str | Iterator[str | ToolCall]:
        """The assistant's reply to a conversation of ``{"role", "content"}`` turns: the text, or an
        iterator of text pieces (then one :class:`ToolCall` per call) when ``stream`` is True.

        The turns run on the model's engine, so consecutive calls reuse its KV
        cache and prefix cache; the conversation is the caller's (pass the
        whole history each time). ``report`` afterwards holds the reply's
        :class:`ChatOutcome`.
        """
        session = ChatSession(self)  # a call's own conversation object: calls from several threads never meet
        reply = session.complete(
            messages,
            stream=stream,
            config=config,
            images=images,
            audio=audio,
            videos=videos,
            tools=tools,
            **overrides,
        )
        if isinstance(reply, str):
            self._set_report(session.report)
            return reply
        return self._reporting(reply, session)

    def _reporting(self, pieces: Iterator[str | ToolCall], session: ChatSession) -> Iterator[str | ToolCall]:
        try:
            yield from pieces
        finally:
            self._set_report(session.report)

    def chat_session(self, **options: Any) -> ChatSession:
        """A new :class:`ChatSession` on this model: a conversation whose turns run on the model's
        engine (``system=`` seeds it, ``max_active=`` raises the engine's limit to that)."""
        return ChatSession(self, **options)


class _StreamedReply(Iterator[Any]):
    """A reply being streamed: iterate it for pieces.

    Closing or dropping it stops delivery while the request runs on to its end;
    :meth:`cancel` stops the request itself. ``on_end`` receives the request's
    report once it ended, however the caller left it.
    """

    def __init__(self, stream: RequestStream, pieces: Iterator[Any], on_end: Any) -> None:
        self._stream = stream
        self._pieces = pieces
        self._done = threading.Event()  # set once the request ended and ``on_end`` heard of it
        self._delivering = True

        def ended() -> None:
            on_end(stream.report)
            self_done.set()

        self_done = self._done  # the callback holds no reference to the reply: dropping it stays possible
        stream.when_ended(ended)

    @property
    def report(self) -> GenerationReport | None:
        """How this reply ended (None while it runs): the model's ``report`` may be another thread's."""
        return self._stream.report

    def __next__(self) -> Any:
        if not self._delivering:
            raise StopIteration
        try:
            return next(self._pieces)
        except StopIteration:
            self._delivering = False
            self._done.wait()  # the end callback runs on the engine's thread, right after the end
            report = self._stream.report
            if report is not None and report.finish_reason == "error":
                raise GenerationError(f"the model failed while generating: {report.error}", report) from None
            raise

    def close(self) -> None:
        """Stop delivery: no more pieces come; the generation runs to completion and ``report``
        is set once it ended."""
        if not self._delivering:
            return
        self._delivering = False
        # Closing the piece generator now would cancel the request (an engine stream left early
        # cancels it): it is closed once the request ended, when that is a no-op.
        pieces = self._pieces
        self._pieces = iter(())
        self._stream.when_ended(pieces.close)  # type: ignore[attr-defined]

    def cancel(self, wait: bool = True) -> None:
        """Stop the generation itself at the next step; returns once it ended (within one step) with
        ``report`` set, or at once with ``wait=False`` (it only posts the cancel: a signal handler's
        way). Iterating on yields what was made before it, then ends."""
        self._stream.cancel()
        if wait:
            self._done.wait()  # the engine's thread ends the request; waiting here holds no lock it needs

    def wait(self, timeout: float | None = None) -> GenerationReport | None:
        """Block until the generation ended (``timeout`` seconds at most); its report."""
        self._done.wait(timeout)
        return self._stream.report

    def __del__(self) -> None:
        self.close()


def _has_audio(messages: Any) -> bool:
    return isinstance(messages, Sequence) and bool(split_audio(list(messages))[1])


def _check_assistant(model: GenerativeModel, assistant: GenerativeModel) -> None:
    """Refuse an assistant whose tokens do not mean the same, or whose context is shorter."""
    if assistant.vocab_size != model.vocab_size:
        raise ValueError(
            f"the assistant's vocabulary has {assistant.vocab_size} tokens, this model's {model.vocab_size}: "
            "an assistant must share the model's vocabulary"
        )
    step = max(1, model.vocab_size // 1024)  # a spread sample: same-family tokenizers agree everywhere
    for token_id in range(0, model.vocab_size, step):
        if assistant.tokenizer.id_to_token(token_id) != model.tokenizer.id_to_token(token_id):
            raise ValueError(
                f"the assistant's token {token_id} is {assistant.tokenizer.id_to_token(token_id)!r}, "
                f"this model's {model.tokenizer.id_to_token(token_id)!r}: an assistant must share the vocabulary"
            )
    if assistant.max_seq < model.max_seq:
        raise ValueError(
            f"the assistant's context window ({assistant.max_seq} tokens) is shorter than this model's "
            f"({model.max_seq})"
        )
