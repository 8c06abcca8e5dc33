"""What a loaded model is: the opened folder ``modelverse.load`` hands over, and the facts read off it.

:class:`Loaded` holds what a load opened (the folder, its tokenizer and chat
template, the engine limits); :class:`ModelFacts` is the part of
``GenerativeModel`` that only reads it: the context window, the template's
abilities, the media towers, the prompt a conversation renders to.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clika_runtime.chat.media_turns import attach_audio, attach_images
from clika_runtime.chat.model import reasoning_mode, supports_tools
from clika_runtime.chat.templates.chat_template import ChatTemplate
from clika_runtime.chat.templates.render import folder_template, render_prompt
from clika_runtime.contract.model_folder import ModelFolder, kv_identity, open_model_folder
from clika_runtime.contract.step_graph import takes_media
from clika_runtime.embedding.embedder import Embedder, open_embedder
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.engine import Engine, EngineOptions
from clika_runtime.engine.prompt_media import PromptMedia
from clika_runtime.engine.stages import StageObserver
from clika_runtime.media.arguments import VideoInput
from clika_runtime.media.audio_prompts import AudioPrompts
from clika_runtime.media.image_prompts import ImagePrompts
from clika_runtime.store.load_target import folder_to_load
from clika_runtime.text.tokenizer import Tokenizer

# What ``compute_dtype`` reads when the checkpoint's own dtype applies (the seed's word for it).
UNDEFINED_DTYPE = "Undefined"


@dataclass
class Loaded:
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


def open_loaded(
    folder: str | Path,
    options: EngineOptions,
    *,
    kv_cache_mode: str | None,
    kv_cache_dtype: str,
    threads: int | None,
    allow_spinning: bool,
) -> Loaded:
    """The model folder (or what a name resolves to) opened, with its tokenizer and chat template."""
    path = folder_to_load(folder)
    opened = open_model_folder(
        path,
        kv_mode=kv_cache_mode or "continuous",
        kv_dtype=kv_cache_dtype,
        threads=threads,
        allow_spinning=allow_spinning,
    )
    tokenizer = opened.text_tokenizer()
    # The paged graph rotates a step's packed tokens in one RotaryEmbedding, which ONNX Runtime
    # refuses when they outnumber its cos/sin table (the context window): a step never packs more.
    step_tokens = min(options.max_step_tokens, opened.manifest.context_window)
    options = dataclasses.replace(options, max_step_tokens=step_tokens)
    return Loaded(opened, tokenizer, folder_template(opened, tokenizer), kv_cache_mode, options, threads)


def open_towers(
    handle: Loaded, observer: Callable[[], StageObserver | None]
) -> tuple[ImagePrompts | None, AudioPrompts | None]:
    """The vision and audio towers of a load (None: it has none, or its step graph takes no
    media embeddings, so a tower would be of no use); ``observer`` reads the model's stage observer."""
    folder, manifest = handle.folder, handle.folder.manifest
    if not takes_media(folder.graph.inputs):
        return None, None
    towers = dict(tokenizer=handle.tokenizer, threads=handle.threads, observer=observer)
    images = None if manifest.vision is None else ImagePrompts(folder.path, manifest.vision, **towers)
    audio = None if manifest.audio is None else AudioPrompts(folder.path, manifest.audio, **towers)
    return images, audio


class ModelFacts:
    """The read-only side of a loaded model (``GenerativeModel`` is one), its embedder beside."""

    _handle: Loaded
    _images: ImagePrompts | None
    _audio: AudioPrompts | None
    _kv_key: str | None
    _engine: Engine | None
    _engine_lock: threading.Lock
    _embedder: Embedder | None
    defaults: GenerationConfig  # the model's own property: an attached assistant changes them

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
        """The vocabulary's size: the logits' width."""
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
        """The chat template, probed at load (None: the folder ships none)."""
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

    # -- media --------------------------------------------------------------------------

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

    def prompt_turn(self, prompt: Any, media: list[Any], audio: list[Any]) -> dict[str, Any]:
        """What one ``prompt`` with its media reads as: a user turn for the chat template
        (``messages``), or raw text with a marker leading for each item the prompt does not
        place (``prompt`` and ``media``: the images and videos, then the clips)."""
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
        if self._handle.template is not None:
            turn: dict[str, Any] = {"role": "user", "content": prompt}
            stills = [item for item in media if not isinstance(item, VideoInput)]
            clips = [item.pair for item in media if isinstance(item, VideoInput)]
            turn = attach_audio(turn, audio) if audio else turn
            return {"messages": [attach_images(turn, stills, clips) if media else turn]}
        if media:
            assert self._images is not None
            videos = sum(isinstance(item, VideoInput) for item in media)
            if videos and self._images.video_marker not in prompt:
                prompt = self._images.video_marker * videos + prompt
            if self._images.marker not in prompt:
                prompt = self._images.marker * (len(media) - videos) + prompt
        elif audio:
            assert self._audio is not None
            prompt = prompt if self._audio.marker in prompt else self._audio.clip_text * len(audio) + prompt
        return {"messages": None, "prompt": prompt, "media": (media, audio)}


def check_assistant(model: ModelFacts, assistant: ModelFacts) -> None:
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
