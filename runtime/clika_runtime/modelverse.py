"""The public API: ``load`` a model folder, then generate with ``GenerativeModel``.

::

    from clika_runtime import modelverse

    model = modelverse.load("path/to/model-folder")
    print(model.generate("Name three colors.", max_new_tokens=32))
    for piece in model.stream_generate("Tell me a story.", temperature=0.7, seed=1):
        print(piece, end="", flush=True)
    for chunk in model.stream_responses("Count to five."):  # GenerationResponse chunks
        print(chunk.text, end="", flush=True)  # the last one has finish_reason and report
    replies = model.generate_batch(["Hi!", "What is 2+2?"])  # decoded together

Every request runs on the model's ONE engine (built on the first request,
reused after): ``generate`` joins ``stream_generate``'s pieces, which drain the
engine's stream for the request (``stream_tokens`` its ids, ``stream_responses``
both, one chunk type); ``generate_batch`` submits every prompt before
reading any reply so they decode together; ``chat``, every ``chat_session()``,
every ``AsyncChat`` and the server submit their turns to the same engine, so
they share its KV cache, its prefix cache, its limits and its stage observer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from clika_runtime.chat.reply.outcome import ChatOutcome
from clika_runtime.chat.reply.streamed import StreamedReply
from clika_runtime.chat.session import ChatSession
from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.embedding.embedder import Embedder
from clika_runtime.engine.config import GenerationConfig, config_from_checkpoint
from clika_runtime.engine.engine import Engine, EngineOptions, RequestStream
from clika_runtime.engine.factory import model_engine
from clika_runtime.engine.report import GenerationReport
from clika_runtime.engine.response import GenerationResponse, responses_of
from clika_runtime.engine.spec_decode.assistant import DEFAULT_ASSISTANT_TOKENS
from clika_runtime.engine.stages import StageEvent, StageObserver
from clika_runtime.model_facts import Loaded, ModelFacts, check_assistant, open_loaded, open_towers
from clika_runtime.model_requests import GivenRequest, run_batch, submit_given

__all__ = [
    "ChatOutcome",
    "ChatSession",
    "GenerationConfig",
    "GenerationReport",
    "GenerationResponse",
    "GenerativeModel",
    "StageEvent",
    "ToolCall",
    "load",
]

KV_CACHE_MODES = ("continuous", "paged")


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
    loaded = open_loaded(
        folder,
        options,
        kv_cache_mode=kv_cache_mode,
        kv_cache_dtype=kv_cache_dtype,
        threads=threads,
        allow_spinning=allow_spinning,
    )
    model = GenerativeModel(loaded)
    if isinstance(assistant_model, (str, Path)):
        assistant_model = load(assistant_model, threads=threads, allow_spinning=allow_spinning)
        model._owned_assistant = assistant_model
    if assistant_model is not None:
        model.set_assistant(assistant_model)
    return model


class GenerativeModel(ModelFacts):
    """A loaded text-generation model.

    ``generate`` returns the reply to one prompt (or to a conversation passed
    as ``messages``); ``stream_generate`` yields the reply piece by piece as
    the model produces it (``stream_tokens`` its token ids, ``stream_responses``
    ``GenerationResponse`` chunks). Decode knobs ride keyword arguments over the
    checkpoint's defaults (``max_new_tokens``, ``temperature``, ``top_p``, ...;
    see :class:`GenerationConfig`). ``report`` holds how the last generation
    ended.
    """

    def __init__(self, handle: Any) -> None:
        self._handle: Loaded = handle
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
        self._images, self._audio = open_towers(handle, lambda: self._observer)
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
            check_assistant(self, model)
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
        helper = None if self._assistant is None else self._assistant._handle
        return model_engine(self._handle, helper, limits, observer)

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

    # -- generation ---------------------------------------------------------------------

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
        or with ``decode=False`` the token ids (see :meth:`stream_tokens`, the typed way).

        A piece never splits a character and never shows a stop string.
        Closing the iterator early (or dropping it) stops delivery; the
        generation itself runs to completion, and ``report`` is set once the
        reply is complete (to this request's report, whichever thread reads
        it). ``cancel()`` on the iterator stops the generation itself at the
        next step, for a caller who wants the compute back.
        """
        given = GivenRequest(prompt, messages, config, images, audio, videos, skip_special_tokens, overrides)
        if not decode:
            return self._stream(given, RequestStream.token_batches, detokenize=False)
        return self._stream(given, RequestStream.texts, detokenize=True)

    def stream_tokens(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        images: Sequence[Any] = (),
        audio: Sequence[Any] = (),
        videos: Sequence[Any] = (),
        skip_special_tokens: bool = True,
        **overrides: Any,
    ) -> Iterator[list[int]]:
        """Generate as ``stream_generate`` does, yielding the reply's token ids undecoded: one list per
        batch the engine handed over (``skip_special_tokens`` only matters to stop strings).

        The iterator closes, cancels and reports as ``stream_generate``'s does.
        """
        given = GivenRequest(prompt, messages, config, images, audio, videos, skip_special_tokens, overrides)
        return self._stream(given, RequestStream.token_batches, detokenize=False)

    def stream_responses(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        images: Sequence[Any] = (),
        audio: Sequence[Any] = (),
        videos: Sequence[Any] = (),
        skip_special_tokens: bool = True,
        **overrides: Any,
    ) -> Iterator[GenerationResponse]:
        """Generate as ``stream_generate`` does, yielding one :class:`GenerationResponse` per step's
        token: its text piece (``stream_generate``'s pieces, empty ones kept) and its ids.

        Only the last chunk has ``finish_reason`` and ``report`` (the
        request's). The iterator closes, cancels and reports as
        ``stream_generate``'s does.
        """
        given = GivenRequest(prompt, messages, config, images, audio, videos, skip_special_tokens, overrides)
        return self._stream(given, responses_of, detokenize=True)

    def _stream(
        self, given: GivenRequest, read: Callable[[RequestStream], Iterator[Any]], *, detokenize: bool
    ) -> StreamedReply:
        """``given`` submitted to the model's engine, its stream read by ``read``; ``report`` set
        once it ends."""
        stream = submit_given(self, given, detokenize=detokenize)
        return StreamedReply(stream, read(stream), self._set_report)

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
        cfg = GenerationConfig.resolve(self.defaults, config, overrides)
        replies, reports, failure = run_batch(self, prompts, cfg, max_active)
        with self._report_lock:
            self._reports = reports
            if reports:
                self._report = reports[-1]
        if failure is not None:
            raise failure
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
        media = {"images": images, "audio": audio, "videos": videos}
        reply = session.complete(messages, stream=stream, config=config, tools=tools, **media, **overrides)
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
