"""Foundry Local's Session shape over a local model: requests of items, streamed responses that
cancel on drop, session options, and an input queue for a request written in pieces.

::

    session = await Session.new(model)
    await session.set_options(RequestOptions(temperature=0.0, max_output_tokens=64))
    response = await session.process_request(Request([Item("What is 2 + 2?")]))
    print(response.text)

    async for item in session.process_streaming_request(Request(["Tell me a story."])):
        print(item.text, end="")          # breaking out (dropping the stream) cancels the reply

    queue = session.create_input_queue()
    reply = asyncio.ensure_future(session.process_request(Request().with_input_queue(queue)))
    queue.push("Summarise: ")             # prefilled while the rest arrives
    queue.push(document)
    queue.close()                         # decoding starts
    print((await reply).text)

A session keeps its conversation: each request adds a user turn and the
reply. :meth:`Session.clone` gives another handle onto the same conversation.
Cancelling the task awaiting :meth:`Session.process_request` (a timeout, a
``TaskGroup`` failing) stops the reply at the engine's next step; leaving an
``async for`` over a stream early (``break``, an exception) stops it at once,
even while the stream is still referenced (each ``async for`` holds its own
delivery, which the loop drops when it is left).

Items carry text, or an image (``Item.image(array)``, [H, W, 3]) or an audio clip
(``Item.audio(samples)``, [S] float mono at 16 kHz) for a model that reads them.
Every failure is a :class:`~clika_runtime.compat.foundry_errors.FoundryLocalError`
(and the Python exception of its kind). ``ChatSession``, ``EmbeddingsSession``
and ``AudioSession`` (:mod:`clika_runtime.compat.foundry_sessions`) are sessions
with task-shaped methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from clika_runtime.compat.foundry_errors import (
    FoundryLocalError,
    GenerationFailedError,
    InvalidRequestError,
    RequestCancelledError,
    foundry_errors,
)
from clika_runtime.engine.engine import Engine
from clika_runtime.engine.report import GenerationReport
from clika_runtime.modelverse import GenerativeModel
from clika_runtime.sessions.chat import AsyncChat
from clika_runtime.sessions.input_queue import InputQueue
from clika_runtime.sessions.results import RunCancelled, TurnResult
from clika_runtime.sessions.session import AsyncSession
from clika_runtime.sessions.turn import TurnStream

__all__ = [
    "FoundryLocalError",
    "GenerationFailedError",
    "InvalidRequestError",
    "Item",
    "ItemQueue",
    "ItemStream",
    "Request",
    "RequestCancelledError",
    "RequestOptions",
    "Response",
    "Session",
]

ITEM_KINDS = ("text", "image", "audio")

# RequestOptions field -> the runtime's generation option.
_OPTION_NAMES = {"max_output_tokens": "max_new_tokens", "stop": "stop"}


@dataclass(frozen=True)
class Item:
    """One piece of a request or a response: text, an image or an audio clip (``data``)."""

    text: str = ""
    kind: str = "text"
    data: Any = None

    def __post_init__(self) -> None:
        if self.kind not in ITEM_KINDS:
            raise InvalidRequestError(f"item kind {self.kind!r} is not one of {ITEM_KINDS}")
        if not isinstance(self.text, str):
            raise InvalidRequestError(f"an item's text must be a string, got {type(self.text).__name__}")
        if self.kind == "text" and self.data is not None:
            raise InvalidRequestError("a text item carries its text, not data: use Item.image or Item.audio")
        if self.kind != "text" and self.data is None:
            raise InvalidRequestError(f"an {self.kind} item needs its data (an array)")

    @classmethod
    def image(cls, data: Any) -> Item:
        """An image item ([H, W, 3] pixels) for a model whose ``supports_vision``."""
        return cls(kind="image", data=data)

    @classmethod
    def audio(cls, data: Any) -> Item:
        """An audio item ([S] float mono samples at 16 kHz) for a model whose ``supports_audio``."""
        return cls(kind="audio", data=data)


@dataclass(frozen=True)
class RequestOptions:
    """Decode options for one request, or for every request of a session (:meth:`Session.set_options`)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_output_tokens: int | None = None
    seed: int | None = None
    repetition_penalty: float | None = None
    stop: tuple[str, ...] | None = None

    def overrides(self) -> dict[str, Any]:
        """The options that are set, named as the runtime names them."""
        chosen = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        return {_OPTION_NAMES.get(name, name): value for name, value in chosen.items()}


class ItemQueue:
    """Items of one request pushed as they become available (see :class:`InputQueue`)."""

    def __init__(self, queue: InputQueue) -> None:
        self._queue = queue

    def push(self, item: Item | str) -> None:
        if isinstance(item, Item) and item.kind != "text":
            raise InvalidRequestError("an input queue streams text: put images and audio on the Request")
        with foundry_errors():
            self._queue.push(item.text if isinstance(item, Item) else item)

    def close(self) -> None:
        self._queue.close()

    def set_head(self, text: str) -> None:
        """The request's own text, which comes before the pushed items."""
        self._queue.head = text

    def abort(self) -> None:
        self._queue.abort()

    @property
    def prefilled_tokens(self) -> int:
        """Prompt tokens computed so far, ahead of the request."""
        return self._queue.prefilled_tokens

    @property
    def progress(self) -> list[tuple[int, int]]:
        """``(characters pushed, prompt tokens computed)`` after each prefill."""
        return list(self._queue.progress)

    async def complete(self) -> str:
        return await self._queue.complete()


class Request:
    """The items of one user turn, its options and, optionally, a queue its text streams in by."""

    def __init__(self, items: Sequence[Item | str] = (), options: RequestOptions | None = None) -> None:
        if isinstance(items, (str, Item)):
            items = [items]
        self.items = tuple(item if isinstance(item, Item) else Item(item) for item in items)
        self.options = options
        self.input_queue: ItemQueue | None = None

    def with_input_queue(self, queue: ItemQueue) -> Request:
        """This request, its text completed by ``queue`` (decoding starts when it is closed)."""
        if not isinstance(queue, ItemQueue):
            raise InvalidRequestError(
                f"an input queue comes from Session.create_input_queue, got {type(queue).__name__}"
            )
        self.input_queue = queue
        queue.set_head("".join(item.text for item in self.items))
        return self

    def with_options(self, options: RequestOptions) -> Request:
        self.options = options
        return self

    async def text(self) -> str:
        head = "".join(item.text for item in self.items)
        if self.input_queue is None:
            return head
        return head + await self.input_queue.complete()

    def media(self) -> dict[str, list[Any]]:
        """The request's images and audio clips, as a turn's ``images=`` and ``audio=``."""
        return {
            "images": [item.data for item in self.items if item.kind == "image"],
            "audio": [item.data for item in self.items if item.kind == "audio"],
        }


@dataclass(frozen=True)
class Response:
    """A request's reply: its items, how it ended and its token usage."""

    items: tuple[Item, ...]
    finish_reason: str
    usage: dict[str, int]
    result: TurnResult

    @property
    def text(self) -> str:
        return "".join(item.text for item in self.items)


class ItemStream:
    """The reply's items as they are made: ``async for item in stream``. Leaving the loop early,
    closing the stream or dropping it cancels the reply at the engine's next step."""

    def __init__(self, session: AsyncSession, request: Request) -> None:
        self._session = session
        self._request = request
        self._turn: TurnStream | None = None
        self._over = False  # the reply ended, or was stopped: no more items come

    def __aiter__(self) -> _Delivery:
        return _Delivery(self)

    async def __anext__(self) -> Item:
        if self._over:
            raise StopAsyncIteration
        with foundry_errors():
            if self._turn is None:
                text = await self._request.text()
                self._turn = self._session.stream(text, **self._request.media(), **_overrides(self._request))
            try:
                while True:
                    event = await self._turn.__anext__()
                    if event.type == "error":
                        raise GenerationFailedError(event.text)
                    if event.type == "text" and event.text:
                        return Item(event.text)
            except StopAsyncIteration:
                self._over = True
                raise
            except RunCancelled:
                if self._over:  # stopped here, at a break: the stream simply ends
                    raise StopAsyncIteration from None
                raise

    @property
    def result(self) -> TurnResult | None:
        """The turn's result once the reply ended (None while it runs, or when it was stopped)."""
        return None if self._turn is None else self._turn.result

    @property
    def report(self) -> GenerationReport | None:
        """How the reply's request ended (None before it started and while it runs)."""
        return None if self._turn is None else self._turn.report

    def stop(self) -> None:
        """Stop the reply at the engine's next step; iterating on ends the stream."""
        self._over = True
        if self._turn is not None and self._turn.result is None:
            self._turn.cancel()

    async def aclose(self) -> None:
        """Stop the reply; returns once the engine freed its slot."""
        self.stop()
        if self._turn is not None:
            await self._turn.aclose()

    def __del__(self) -> None:
        self.stop()


class _Delivery:
    """One ``async for`` over an :class:`ItemStream`. The loop holds the only reference to it, so
    a loop left before the end (``break``, an exception) drops it, and that stops the reply."""

    def __init__(self, stream: ItemStream) -> None:
        self._stream = stream
        self._ended = False

    def __aiter__(self) -> _Delivery:
        return self

    async def __anext__(self) -> Item:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            self._ended = True
            raise

    def __del__(self) -> None:
        if not self._ended:
            self._stream.stop()


@dataclass
class _Shared:
    """What every handle of one session shares; the last handle closed releases it."""

    session: AsyncSession
    chat: AsyncChat
    handles: int = 1


class Session:
    """A stateful session bound to a model (see the module docstring)."""

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared
        self._session = shared.session
        self._closed = False

    @classmethod
    async def new(
        cls, model: GenerativeModel, *, system: str | None = None, engine: Engine | None = None
    ) -> Session:
        """Open a session on a loaded model; it inherits the model's generation defaults.
        ``engine`` shares an existing engine of the model (a server's, the model's own)."""
        if not isinstance(model, GenerativeModel):
            raise InvalidRequestError(
                f"Session.new takes a loaded model (modelverse.load), got {type(model).__name__}"
            )
        cls._check_model(model)
        chat = AsyncChat(model, system=system, engine=engine)
        return cls(_Shared(chat.create_session(persist=False), chat))

    @classmethod
    def _check_model(cls, model: GenerativeModel) -> None:
        """Refuse a model the session kind cannot use (every model serves a plain session)."""

    @property
    def model(self) -> GenerativeModel:
        """The model the session runs on."""
        return self._shared.chat.model  # type: ignore[return-value]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far."""
        return self._session.messages

    async def process_request(self, request: Request) -> Response:
        """Run one request and return the whole response (cancel-on-drop: see the module docstring)."""
        with foundry_errors():
            text = await _checked(request).text()
            result = await self._session.send(text, **request.media(), **_overrides(request))
        if result.is_error:
            raise GenerationFailedError(result.result)
        items = (Item(result.result),) if result.result else ()
        return Response(items, result.finish_reason, dict(result.usage), result)

    def process_streaming_request(self, request: Request) -> ItemStream:
        """Run one request, streaming each output item as it is made; dropping the stream cancels."""
        return ItemStream(self._session, _checked(request))

    async def set_options(self, options: RequestOptions) -> None:
        """Options that persist across this session's later requests (a request's own win)."""
        if not isinstance(options, RequestOptions):
            raise InvalidRequestError(f"options must be RequestOptions, got {type(options).__name__}")
        with foundry_errors():
            self._session.set_options(options.overrides())

    def create_input_queue(self) -> ItemQueue:
        """A queue for streaming a request's input in pieces (attach with ``Request.with_input_queue``)."""
        return ItemQueue(InputQueue(self._session))

    def clone(self) -> Session:
        """Another handle onto this session: the same conversation and options."""
        if self._closed:
            raise InvalidRequestError("this session handle is closed")
        self._shared.handles += 1
        return Session(self._shared)

    async def close(self) -> None:
        """Close this handle; the last one closed cancels a running request and releases the engine."""
        if self._closed:
            return
        self._closed = True
        self._shared.handles -= 1
        if self._shared.handles == 0:
            await self._session.close()
            self._shared.chat.close()


def _checked(request: Request) -> Request:
    if not isinstance(request, Request):
        raise InvalidRequestError(f"a request must be a Request, got {type(request).__name__}")
    return request


def _overrides(request: Request) -> dict[str, Any]:
    return {} if request.options is None else request.options.overrides()
