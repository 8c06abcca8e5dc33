"""The server's model side: the model's engine shared by every request, replies as events.

All requests go to ONE engine, the model's (the one its ``generate``, ``chat``
and sessions use), so requests that arrive together decode together
(continuous batching). The server admits at most ``max_active + max_queued``
requests of its own at once and answers 503 beyond that. A request becomes a :class:`ReplyRun`: its
``events()`` drains the engine's stream on a worker thread and turns the text
into the reply's channels (visible text, reasoning, tool calls) with the same
parser a :class:`~clika_runtime.chat.session.ChatSession` uses.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from clika_runtime.chat.reply.events import (
    CallDelta,
    Finished,
    ReasoningDelta,
    ReplyEvent,
    ReplyReader,
    TextDelta,
    reply_events,
)
from clika_runtime.chat.reply.parser import ReplyParser
from clika_runtime.chat.tools.choice import chosen_tools
from clika_runtime.chat.turn import offered_tools, prepare_turn
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.engine import Engine, RequestStream
from clika_runtime.engine.errors import EngineClosedError, QueueFullError, TurnError
from clika_runtime.engine.logprobs import TokenLogprob
from clika_runtime.grammar.vocabulary import grammar_vocabulary
from clika_runtime.modelverse import GenerativeModel
from clika_runtime.server.errors import ApiError, bad_request
from clika_runtime.server.media_parts import request_audio, request_images
from clika_runtime.server.prompt_bound import PromptBound
from clika_runtime.server.protocol import ChatRequest
from clika_runtime.server.sampling import REQUEST_FIELD

# The reply's events are the chat layer's one vocabulary (re-exported: the server's shapes read them).
Event = ReplyEvent
__all__ = ["CallDelta", "Event", "Finished", "ModelBackend", "ReasoningDelta", "ReplyRun", "TextDelta"]


class ReplyRun:
    """One submitted request: ``events()`` (blocking; run it on a worker thread) and ``cancel()``."""

    def __init__(self, stream: RequestStream, parser: ReplyParser | None) -> None:
        self.stream = stream
        self.parser = parser
        self.created = int(time.time())
        # Token log-probabilities as they arrive (when asked for), taken by a streamed reply's chunks.
        self.fresh_logprobs: collections.deque[TokenLogprob] = collections.deque()

    def take_logprobs(self) -> list[TokenLogprob]:
        """The log-probabilities that arrived since the last call."""
        taken = []
        while self.fresh_logprobs:
            taken.append(self.fresh_logprobs.popleft())
        return taken

    def cancel(self) -> None:
        """Stop the decode at the next engine step (no-op once it ended)."""
        self.stream.cancel()

    def events(self) -> Iterator[Event]:
        """The reply as events; the last is :class:`Finished` (an engine failure raises RuntimeError)."""
        reader = ReplyReader(self.parser)
        pieces = self._texts()
        try:
            yield from reply_events(pieces, reader)
        finally:
            pieces.close()  # type: ignore[attr-defined]  # a consumer that stopped early cancels
        report = self.stream.report
        assert report is not None, "the engine ended a stream without a report"
        if report.finish_reason == "error":
            raise RuntimeError(f"the model failed while generating: {report.error}")
        yield reader.finished(report)

    def _texts(self) -> Iterator[str]:
        deltas = iter(self.stream)
        try:
            for delta in deltas:
                self.fresh_logprobs.extend(delta.logprobs)  # before its text: a chunk finds them there
                if delta.text:
                    yield delta.text
        finally:
            deltas.close()  # type: ignore[attr-defined]  # a consumer that stopped early cancels


def _build_grammar_vocabulary(model: GenerativeModel) -> None:
    """The grammar engine's copy of the vocabulary, built before serving: it takes 0.3 s (a 49k
    vocabulary) to a second (150k) and holds the GIL all along, so built by the first structured
    request it would stall the event loop (``/health``, every stream) for as long."""
    if model.tokenizer is None or importlib.util.find_spec("llguidance") is None:
        return  # no structured output without either: nothing to build
    grammar_vocabulary(model.tokenizer, model.vocab_size)


class ModelBackend:
    """A loaded model, the id clients call it by, and the one engine every request shares.

    ``engine`` None: the model's engine, its limits raised to ``max_active`` and
    ``max_queued`` when those are higher.
    """

    def __init__(
        self,
        model: GenerativeModel,
        model_id: str,
        *,
        max_active: int = 8,
        max_queued: int = 64,
        engine: Engine | None = None,
        owns_model: bool = False,
        default_max_tokens: int = 1024,
        image_files: bool = False,
    ) -> None:
        self.model = model
        self.image_files = image_files  # image_url parts may name local files (never remote URLs)
        self.prompt_bound = PromptBound(model.tokenizer, model.max_seq)
        self.prompt_bound.longest_token_bytes  # noqa: B018 (a vocabulary scan: before serving, not in a request)
        _build_grammar_vocabulary(model)
        self.model_id = model_id
        self.default_max_tokens = default_max_tokens
        self.created = int(time.time())
        if engine is None:
            model.raise_limits(max_active=max_active, max_queued=max_queued)
        self._engine = engine
        self._owns_model = owns_model
        self._admits = max_active + max_queued
        self._in_flight = 0  # this server's requests submitted and not ended
        self._in_flight_lock = threading.Lock()
        # Called (on the engine's thread, so it must return at once) when the last running request ends.
        self.on_idle: Callable[[], None] | None = None
        self.on_cancelled: Callable[[], None] | None = None  # a request stopped before it finished
        self._card: dict[str, Any] | None = None

    # -- what is served ------------------------------------------------------------------------

    def token_text(self, token: int) -> str:
        """One token's text as a logprobs entry shows it."""
        return self.model.tokenizer.decode([token], skip_special_tokens=False)

    @property
    def engine(self) -> Engine:
        """The engine the server's requests run on (the model's unless one was given)."""
        return self._engine if self._engine is not None else self.model.engine

    @property
    def busy(self) -> bool:
        """Whether requests of this server's are running or waiting on the engine."""
        return self._in_flight > 0

    def card(self) -> dict[str, Any]:
        """What the model can do (probed once: the probes render its chat template; call off the event loop)."""
        if self._card is None:
            model = self.model
            self._card = {
                "context_window": model.max_seq,
                "supports_tools": model.supports_tools,
                "reasoning_mode": model.reasoning_mode,
            }
        return self._card

    def load(self) -> dict[str, int]:
        """Requests decoding and waiting as of the engine's last step (read without stopping it)."""
        load = self.engine.load
        return {"active": load.running, "waiting": load.waiting}

    def close(self) -> None:
        """Release what the server owns: a model it loaded itself (and with it the engine)."""
        if self._owns_model:
            self.model.close()

    # -- requests --------------------------------------------------------------------------------

    def start_chat(self, request: ChatRequest) -> ReplyRun:
        """Render the conversation, submit it, and return the run (400 / 503 ApiError when refused)."""
        return self.start_chat_choices(request, 1)[0]

    def start_chat_choices(self, request: ChatRequest, n: int) -> list[ReplyRun]:
        """``n`` replies to one conversation, rendered once and submitted together (they decode in
        the same steps and share the prompt's KV); a given seed becomes seed + i for choice i."""
        offered = self._offered_tools(request)
        config = self._config(request.options)
        messages, images = request_images(request.messages, self.model.supports_vision, self.image_files)
        messages, audio = request_audio(messages, self.model.supports_audio, self.model.audio_sampling_rate)
        try:
            turn = prepare_turn(
                self.model,
                messages,
                offered,
                config,
                media=(images, audio),
                choice=request.tool_choice,
                parallel=request.parallel_tool_calls,
                encode=partial(self.prompt_bound.encode, param="messages"),
            )
        except TurnError as exc:
            raise refusal(exc) from None
        config = turn.policy_for(config)

        def start(choice: int) -> ReplyRun:
            options = {"skip_special_tokens": turn.skip_special_tokens, "media": turn.media}
            stream = self._submit(
                turn.prompt_ids, _choice_config(config, choice), request.max_tokens_given, **options
            )
            return ReplyRun(stream, turn.new_parser())

        return start_all(partial(start, choice) for choice in range(n))

    def start_completion(
        self, prompt: str | list[int], options: Mapping[str, Any], max_tokens_given: bool, choice: int = 0
    ) -> ReplyRun:
        """Submit raw text (no chat template) or token ids (``choice``: which of n, for its seed)."""
        config = _choice_config(self._config(options), choice)
        if isinstance(prompt, str):
            ids = self.prompt_bound.encode(prompt, "prompt")
        else:
            ids = list(prompt)
        return ReplyRun(self._submit(ids, config, max_tokens_given), None)

    def _offered_tools(self, request: ChatRequest) -> list[dict[str, Any]] | None:
        tools = chosen_tools(request.tools, request.tool_choice)
        if not tools:
            return None
        if not self.model.supports_tools:
            raise bad_request(
                f"the model {self.model_id!r} takes no tools (its chat template has no tools slot)", "tools"
            )
        try:
            return offered_tools(self.model, tools)
        except TurnError as exc:
            raise refusal(exc) from None

    def _config(self, options: Mapping[str, Any]) -> GenerationConfig:
        try:
            return self.model.defaults.overlay(options)
        except TurnError as exc:  # each option is checked by name
            raise refusal(exc) from None
        except (ValueError, TypeError) as exc:
            raise bad_request(str(exc)) from None

    def _submit(
        self, ids: Sequence[int], config: GenerationConfig, max_tokens_given: bool, **options: Any
    ) -> RequestStream:
        window = self.model.max_seq
        if max_tokens_given and len(ids) + config.max_new_tokens > window:
            raise bad_request(
                f"the prompt has {len(ids)} tokens and max_tokens asks for {config.max_new_tokens} more; "
                f"the context window is {window} tokens",
                "max_tokens",
                "context_length_exceeded",
            )
        if not max_tokens_given:
            # No limit asked: a bounded default, because the KV cache reserves room for the whole
            # reply in every slot (a reply may still end earlier at the context window).
            config = config.overlay({"max_new_tokens": self.default_max_tokens})
        try:
            self._admit()
            try:
                stream = self.engine.submit(ids, config, **options)
            except BaseException:
                self._leave()
                raise
            stream.when_ended(partial(self._stream_ended, stream))
            return stream
        except QueueFullError as exc:
            raise ApiError(503, f"the server is busy: {exc}", code="queue_full") from None
        except EngineClosedError as exc:
            raise ApiError(503, str(exc), code="engine_closed") from None
        except TurnError as exc:  # an option the engine cannot honour, a prompt too long for it
            raise refusal(exc) from None
        except ValueError as exc:
            raise bad_request(str(exc), "messages") from None

    @contextlib.contextmanager
    def admitted(self) -> Iterator[None]:
        """Hold one of the server's admissions for work outside the engine (embeddings); 503 when full."""
        try:
            self._admit()
        except QueueFullError as exc:
            raise ApiError(503, f"the server is busy: {exc}", code="queue_full") from None
        try:
            yield
        finally:
            self._leave()

    def _admit(self) -> None:
        with self._in_flight_lock:
            if self._in_flight >= self._admits:
                raise QueueFullError(
                    f"{self._in_flight} requests are running or waiting; retry once some finish"
                )
            self._in_flight += 1

    def _stream_ended(self, stream: RequestStream) -> None:
        report = stream.report
        if report is not None and report.finish_reason == "cancelled" and self.on_cancelled is not None:
            self.on_cancelled()
        self._leave()

    def _leave(self) -> None:
        with self._in_flight_lock:
            self._in_flight -= 1
            idle = self._in_flight == 0
        if idle and self.on_idle is not None:
            self.on_idle()


def start_all(starts: Iterable[Callable[[], ReplyRun]]) -> list[ReplyRun]:
    """Every run ``starts`` start, in order; when one is refused, the runs started before it are
    cancelled (so a request's choices are all submitted or none stay running) and the refusal raised."""
    runs: list[ReplyRun] = []
    try:
        for start in starts:
            runs.append(start())
    except BaseException:
        for run in runs:
            run.cancel()
        raise
    return runs


def refusal(exc: TurnError) -> ApiError:
    """The 400 a refused turn answers: its context before its message, the request field it names
    ("messages" when it names none) and its code."""
    message = f"{exc.context}: {exc}" if exc.context else str(exc)
    param = REQUEST_FIELD.get(exc.field, exc.field) if exc.field else "messages"
    return bad_request(message, param, exc.code)


def _choice_config(config: GenerationConfig, choice: int) -> GenerationConfig:
    """Choice ``choice``'s decode policy: its own seed when the request gave one."""
    if choice == 0 or config.seed is None:
        return config
    return config.overlay({"seed": config.seed + choice})
