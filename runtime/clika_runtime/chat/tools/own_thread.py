"""A blocking call awaited on a thread of its own, which a cancelled caller does not wait for.

``asyncio.to_thread`` runs the call on the event loop's default executor, and
``asyncio.run`` waits for that executor's threads before it returns: a Ctrl-C
while a tool's function blocks (a network call, a long computation) cancelled
the tool loop at once but then held the program until the function returned,
20 s for a 20 s tool. Python cannot stop a running thread, so the call goes on
to its end on a daemon thread and its result is dropped; the awaiting
coroutine is cancelled at once and ``asyncio.run`` has nothing to wait for.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def on_own_thread(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` on a new daemon thread (in this context's variables, as
    ``asyncio.to_thread`` runs it); its result, or its exception raised here."""
    loop = asyncio.get_running_loop()
    settled: asyncio.Future[T] = loop.create_future()
    call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)

    def run() -> None:
        try:
            value = call()
        except BaseException as error:  # handed to the awaiting coroutine as it is
            _hand_over(loop, settled, None, error)
        else:
            _hand_over(loop, settled, value, None)

    threading.Thread(target=run, name="clika-call", daemon=True).start()
    return await settled


def _hand_over(
    loop: asyncio.AbstractEventLoop, settled: asyncio.Future[Any], value: Any, error: BaseException | None
) -> None:
    try:
        loop.call_soon_threadsafe(_settle, settled, value, error)
    except RuntimeError:  # the loop is closed: the caller was cancelled and is gone
        pass


def _settle(settled: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if settled.done():  # the awaiting coroutine was cancelled meanwhile
        return
    if error is not None:
        settled.set_exception(error)
    else:
        settled.set_result(value)
