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
``TaskGroup`` failing) stops the reply at the engine's next step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from clika_runtime.engine.engine import Engine
from clika_runtime.modelverse import GenerativeModel
from clika_runtime.sessions.chat import AsyncChat
from clika_runtime.sessions.input_queue import InputQueue
from clika_runtime.sessions.results import TurnResult
from clika_runtime.sessions.session import AsyncSession
from clika_runtime.sessions.turn import TurnStream

__all__ = ["Item", "ItemQueue", "ItemStream", "Request", "RequestOptions", "Response", "Session"]

# RequestOptions field -> the runtime's generation option.
_OPTION_NAMES = {"max_output_tokens": "max_new_tokens", "stop": "stop"}


@dataclass(frozen=True)
class Item:
    """One piece of a request or a response: text (the modality this model reads)."""

    text: str
    kind: str = "text"

    def __post_init__(self) -> None:
        if self.kind != "text":
            raise ValueError(f"item kind {self.kind!r} is not supported: this model reads text only")
        if not isinstance(self.text, str):
            raise ValueError(f"an item's text must be a string, got {type(self.text).__name__}")


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
            raise ValueError(
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
    """The reply's items as they are made: ``async for item in stream``. Closing or dropping it
    cancels the reply at the engine's next step."""

    def __init__(self, session: AsyncSession, request: Request) -> None:
        self._session = session
        self._request = request
        self._turn: TurnStream | None = None
        self._items = self._generate()

    def __aiter__(self) -> ItemStream:
        return self

    async def __anext__(self) -> Item:
        return await self._items.__anext__()

    @property
    def result(self) -> TurnResult | None:
        return None if self._turn is None else self._turn.result

    async def aclose(self) -> None:
        await self._items.aclose()

    async def _generate(self) -> AsyncIterator[Item]:
        text = await self._request.text()
        overrides = _overrides(self._request)
        self._turn = self._session.stream(text, **overrides)
        async with self._turn:
            async for event in self._turn:
                if event.type == "text" and event.text:
                    yield Item(event.text)

    def __del__(self) -> None:
        if self._turn is not None and self._turn.result is None:
            self._turn.cancel()


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
            raise ValueError(
                f"Session.new takes a loaded model (modelverse.load), got {type(model).__name__}"
            )
        chat = AsyncChat(model, system=system, engine=engine)
        return cls(_Shared(chat.create_session(persist=False), chat))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far."""
        return self._session.messages

    async def process_request(self, request: Request) -> Response:
        """Run one request and return the whole response (cancel-on-drop: see the module docstring)."""
        text = await _checked(request).text()
        result = await self._session.send(text, **_overrides(request))
        items = (Item(result.result),) if result.result else ()
        return Response(items, result.finish_reason, dict(result.usage), result)

    def process_streaming_request(self, request: Request) -> ItemStream:
        """Run one request, streaming each output item as it is made; dropping the stream cancels."""
        return ItemStream(self._session, _checked(request))

    async def set_options(self, options: RequestOptions) -> None:
        """Options that persist across this session's later requests (a request's own win)."""
        if not isinstance(options, RequestOptions):
            raise ValueError(f"options must be RequestOptions, got {type(options).__name__}")
        self._session.set_options(options.overrides())

    def create_input_queue(self) -> ItemQueue:
        """A queue for streaming a request's input in pieces (attach with ``Request.with_input_queue``)."""
        return ItemQueue(InputQueue(self._session))

    def clone(self) -> Session:
        """Another handle onto this session: the same conversation and options."""
        if self._closed:
            raise ValueError("this session handle is closed")
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
        raise ValueError(f"a request must be a Request, got {type(request).__name__}")
    return request


def _overrides(request: Request) -> dict[str, Any]:
    return {} if request.options is None else request.options.overrides()
