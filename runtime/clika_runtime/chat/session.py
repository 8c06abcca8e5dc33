"""ChatSession: a conversation that keeps its own history; its turns are requests on the model's engine.

Each turn renders the whole history through the model's chat template, runs it
on the model's engine (one continuous-batching engine per model, shared with
every other front end, so a session's turns reuse its KV cache and prefix
cache, and sessions decode together), and parses the reply into
its channels (:class:`~clika_runtime.chat.reply.parser.ReplyParser`): the visible
text, the tool calls (when the turn offered tools) and, for a model with a
reasoning channel, the reasoning, which goes to ``report.reasoning`` and into
the history's ``reasoning_content`` but never into the visible text.

Turns run one after another: a new turn first closes a streamed reply that is
still open (its decode is cancelled at the next step). Every session kind keeps
one rule: a reply joins the history once complete (a streamed reply when its
iterator finishes), with its user turn; a reply closed, cancelled or failed
before its end leaves the history as it was (``report`` still says how it ended).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.history import checked_messages, seed_history
from clika_runtime.chat.history_turns import assistant_turn, kept_on_reset, tool_result_turn
from clika_runtime.chat.kv_resume import ConversationPrompt, conversation_prompt, restore_kv, save_kv
from clika_runtime.chat.media_turns import (
    attach_audio,
    attach_images,
    refuse_media_for,
    with_audio_on_last_user_turn,
    with_images_on_last_user_turn,
)
from clika_runtime.chat.model import ChatCard, chat_card
from clika_runtime.chat.reply.events import ReplyReader, visible_text
from clika_runtime.chat.reply.outcome import ChatOutcome
from clika_runtime.chat.reply.parser import ReplyParser
from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.chat.tools.loop import LoopHooks, LoopResult, run_tool_loop
from clika_runtime.chat.tools.toolkit import Toolkit
from clika_runtime.chat.tools.turns import ChatConversation
from clika_runtime.chat.turn import check_chat_arguments, offered_tools, prepare_turn, submit_turn
from clika_runtime.engine.config import GenerationConfig

if TYPE_CHECKING:
    from clika_runtime.chat.model import ChatModel
    from clika_runtime.engine.engine import Engine, RequestStream


class ChatSession:
    """A conversation with a text-generation model that keeps its own history.

    ::

        with model.chat_session(system="You are terse.") as chat:
            print(chat.send("hi"))
            for piece in chat.send("and now?", stream=True):
                print(piece, end="", flush=True)

    ``tools=`` (on the session or per turn) offers tool definitions (the OpenAI
    envelope or the bare function object); a turn offered tools returns the
    reply's visible text, a streamed one yields its text pieces and then one
    :class:`ToolCall` per call, ``tool_calls`` holds them, and the history's
    assistant turn carries them. :meth:`add_tool_result` appends a tool's
    answer and :meth:`respond` runs the conversation on. A model that takes no
    tools refuses an offer with ValueError.

    The turns run on the model's engine; ``max_active`` and ``max_queued``
    raise its limits to those when they are higher (they never lower them).

    ``messages=`` continues a conversation kept elsewhere (a saved transcript,
    system turn included); it and ``system=`` are exclusive.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        system: str | None = None,
        model_id: str = "",
        max_active: int = 1,
        max_queued: int = 256,
        default_budget: int = 256,
        tools: Sequence[Mapping[str, Any]] | None = None,
        messages: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        check_chat_arguments(default_budget, system)
        history = seed_history(system, messages)
        self._model = model
        self._tools = offered_tools(model, tools)
        self._defaults = model.defaults.overlay({"max_new_tokens": default_budget})
        self._card = chat_card(model, model_id)
        model.raise_limits(max_active=max_active, max_queued=max_queued)
        self._lock = threading.RLock()  # the session's state; held only briefly
        self._turns = threading.Lock()  # turns run one after another; close() never waits for it
        self._history: list[dict[str, Any]] = history
        self._live: tuple[Iterator[str | ToolCall], RequestStream] | None = None
        # A cancel() while a turn is prepared (its template rendered) cancels it once submitted.
        self._preparing = False
        self._cancel_pending = False
        self._report: ChatOutcome | None = None
        self._tool_calls: list[ToolCall] = []
        self._closed = False

    # -- state ----------------------------------------------------------------------------------

    @property
    def model(self) -> ChatModel:
        """The model the session talks to."""
        return self._model

    @property
    def card(self) -> ChatCard:
        """What the session's engine advertises about the model (a ChatCard)."""
        return self._card

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def engine(self) -> Engine:
        """The engine the session's turns run on: the model's."""
        return self._model.engine

    @property
    def report(self) -> ChatOutcome | None:
        """How the last reply ended (a ChatOutcome), or None before the first."""
        return self._report

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls the last reply made (empty when none, or when the turn offered no tools)."""
        return list(self._tool_calls)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """A copy of the conversation so far, in the message shape."""
        with self._lock:
            return [dict(message) for message in self._history]

    @messages.setter
    def messages(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Replace the conversation (a streamed reply still open is closed first); :meth:`respond`
        or the next :meth:`send` runs on from the new history."""
        checked = checked_messages(messages)
        with self._lock:
            self._close_live()
            self._history = checked

    # -- turns ----------------------------------------------------------------------------------

    def send(
        self,
        content: str,
        *,
        stream: bool = False,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        images: Sequence[Any] = (),
        audio: Sequence[Any] = (),
        videos: Sequence[Any] = (),
        tools: Sequence[Mapping[str, Any]] | None = None,
        **overrides: Any,
    ) -> str | Iterator[str | ToolCall]:
        """Add a user turn and return the assistant's reply (an iterator of pieces when ``stream``).

        The reply joins the history once complete (a streamed reply when its iterator finishes;
        one closed before its end leaves the history as it was). ``tools`` offers tool
        definitions for this turn (None: the session's); keyword arguments
        overlay the decode policy (``enable_thinking=False``, ``reasoning_effort=``, ...;
        ``tool_choice="required"`` or a function's name holds the reply to a valid call of
        the offered tools, ``parallel_tool_calls=False`` to one).
        """
        if not isinstance(content, str):
            raise ValueError(f"content must be a string, got {type(content).__name__}")
        refuse_media_for(self._model, images, audio, videos)
        # The media stay in the history: every later turn renders (and reuses) them again.
        turn = attach_audio(attach_images({"role": "user", "content": content}, images, videos), audio)
        return self._turn(lambda: ([*self._history, turn], [turn]), stream, config, tools, overrides)

    def respond(
        self,
        *,
        stream: bool = False,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **overrides: Any,
    ) -> str | Iterator[str | ToolCall]:
        """Run the conversation on from where it stands (after :meth:`add_tool_result`) and append the reply."""

        def conversation() -> tuple[list[Mapping[str, Any]], list[dict[str, Any]]]:
            if not self._history:
                raise ValueError("the conversation is empty: send a user turn first")
            return list(self._history), []

        return self._turn(conversation, stream, config, tools, overrides)

    def complete(
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
        """The assistant's reply to an explicit conversation, leaving the session's history untouched."""
        refuse_media_for(self._model, images, audio, videos)
        conversation = with_audio_on_last_user_turn(
            with_images_on_last_user_turn(messages, images, videos), audio
        )
        return self._turn(lambda: (conversation, None), stream, config, tools, overrides)

    def run(
        self,
        prompt: str,
        *,
        toolkit: Toolkit,
        max_turns: int | None = None,
        hooks: LoopHooks | None = None,
        **turn_options: Any,
    ) -> LoopResult:
        """Add a user turn and run the model with ``toolkit``'s tools until it answers without a
        call (or ``max_turns`` model calls have run); each call runs (one reply's calls
        concurrently) and its output joins the history as a tool turn. :meth:`close` from another
        thread ends the loop (LoopCancelled). Not for use inside a running event loop: an async
        session's ``run`` is."""
        return asyncio.run(
            run_tool_loop(
                ChatConversation(self, turn_options), prompt, toolkit, max_turns=max_turns, hooks=hooks
            )
        )

    def add_tool_result(self, call_id: str, content: str, *, name: str = "") -> None:
        """Append a tool's answer as a tool turn; :meth:`respond` then runs the model on."""
        turn = tool_result_turn(call_id, content, name)
        with self._lock:
            self._before_turn()
            self._history.append(turn)

    def reset(self, *, keep_system: bool = True) -> None:
        """Forget the conversation (the system turn stays unless told otherwise)."""
        with self._lock:
            self._close_live()
            self._history = kept_on_reset(self._history, keep_system)
            self._report = None
            self._tool_calls = []

    def save_kv(self, path: str | Path) -> int:
        """Write the conversation's KV to ``path`` (atomically; beside its transcript, e.g.
        ``SQLiteStore.kv_path``), so a later process resumes it without reading it again; returns
        how many tokens it holds. The KV left by the last turn is reused: only the end of the
        transcript the cache does not hold yet (the assistant turn's closing tokens) is computed."""
        with self._lock:
            prompt = self._transcript()
        return save_kv(self._model, self.engine, prompt, path)

    def restore_kv(self, path: str | Path) -> int:
        """Install the KV saved at ``path`` (by :meth:`save_kv`, in this process or another) for
        the conversation's tokens, so the next turn starts from it (``report.cached_tokens``);
        returns how many tokens were restored. A file of another model, a damaged or truncated
        one, or one whose tokens the conversation no longer starts with is logged and left out
        (0, or the tokens still shared): the turn then reads the rest as usual."""
        with self._lock:
            prompt = self._transcript()
        return restore_kv(self._model, self.engine, prompt, path)

    def cancel(self) -> None:
        """Stop the live turn at its next decode step; the session goes on (what the reply said
        joins the history as it ends). It takes no lock and only posts a cancel to the engine, so
        a signal handler may call it."""
        if self._preparing:  # a turn is being rendered and submitted: cancelled once it exists
            self._cancel_pending = True
        live = self._live
        if live is not None:
            live[1].cancel()

    def close(self) -> None:
        """Cancel the live turn at its next decode step (streamed or not, from any thread) and drop
        the turns queued behind it; later turns raise ValueError (the model's engine stays)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live, self._live = self._live, None
        if live is not None:
            live[1].cancel()  # its reply never joins the history: the session is closed

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the machinery --------------------------------------------------------------------------

    def _turn(
        self,
        conversation: Any,
        stream: bool,
        config: GenerationConfig | Mapping[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        overrides: Mapping[str, Any],
    ) -> str | Iterator[str | ToolCall]:
        """Run one turn after the ones before it: ``conversation()`` gives, once it is this turn's
        go, the messages to reply to and the turns to commit (None: commit nothing)."""
        with self._turns:
            with self._lock:
                self._cancel_pending, self._preparing = False, True
                try:
                    self._before_turn()  # a turn queued behind a close() is dropped here
                    messages, commit = conversation()
                    request, pieces = self._start(messages, commit, config, tools, overrides)
                    self._live = (pieces, request)
                finally:
                    self._preparing = False
                if self._cancel_pending:  # cancel() came while the turn was rendered and submitted
                    request.cancel()
            if stream:
                return pieces
            return "".join(piece for piece in pieces if isinstance(piece, str))

    def transcript_tokens(self) -> list[int]:
        """The tokens every next turn of the conversation starts with (its saved KV holds them)."""
        return self._transcript().token_ids

    def _transcript(self) -> ConversationPrompt:
        policy = GenerationConfig.resolve(self._defaults, None, {})
        return conversation_prompt(self._model, self._history, self._tools, policy)

    def _before_turn(self) -> None:
        if self._closed:
            raise ValueError("this chat session is closed")
        self._close_live()

    def _close_live(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            pieces, request = live
            request.cancel()
            pieces.close()  # type: ignore[attr-defined]  # a started reply records its report

    def _start(
        self,
        messages: list[Mapping[str, Any]],
        commit: list[dict[str, Any]] | None,
        config: GenerationConfig | Mapping[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        overrides: Mapping[str, Any],
    ) -> tuple[RequestStream, Iterator[str | ToolCall]]:
        offered = offered_tools(self._model, tools) if tools is not None else self._tools
        policy = GenerationConfig.resolve(self._defaults, config, overrides)
        prepared = prepare_turn(self._model, messages, offered, policy)
        request = submit_turn(self._model.engine, prepared, policy)
        return request, self._pieces(request, prepared.parser, commit)

    def _pieces(
        self, request: RequestStream, parser: ReplyParser, commit: list[dict[str, Any]] | None
    ) -> Iterator[str | ToolCall]:
        complete = False
        reader = ReplyReader(parser)
        try:
            with request:
                for text in request.texts():
                    yield from visible_text(reader.feed(text))
            yield from visible_text(reader.finish())
            complete = True
            yield from list(parser.tool_calls)  # a streamed reply's calls come after its text
        finally:
            if not complete:
                parser.finish()
                for _ in request:  # wait for the cancelled request's end (one engine step)
                    pass
            self._record(request, parser, commit if complete else None)

    def _record(
        self, request: RequestStream, parser: ReplyParser, commit: list[dict[str, Any]] | None
    ) -> None:
        calls = list(parser.tool_calls)
        outcome = ChatOutcome(parser.text, request.report, parser.reasoning, tuple(calls))  # type: ignore[arg-type]
        with self._lock:
            if self._live is not None and self._live[1] is request:
                self._live = None
            self._report = outcome
            self._tool_calls = calls
            report = request.report
            ended = report is not None and report.finish_reason not in ("cancelled", "error")
            if commit is None or self._closed or not ended:
                return  # only a complete reply joins the history
            self._history.extend([*commit, assistant_turn(parser.text, calls, parser.reasoning)])
