"""n choices of one request streamed as one: each choice's chunks carry its index, in the order
the choices make them, and one usage chunk closes the stream when asked for (the prompt counted
once, every choice's completion)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from clika_runtime.engine.report import GenerationReport
from clika_runtime.server.backend import Event, Finished, ReplyRun
from clika_runtime.server.bridge import run_events
from clika_runtime.server.openai.shapes import choices_usage

Chunker = Callable[[Event], list[dict[str, Any]]]


async def merged_chunks(
    runs: Sequence[ReplyRun],
    chunkers: Sequence[Chunker],
    usage_base: dict[str, Any] | None,
    record: Callable[[GenerationReport], None],
) -> AsyncIterator[dict[str, Any]]:
    """The chunks of every run as they come; ``usage_base`` (None: no usage chunk) is the
    envelope of the final usage chunk."""
    queue: asyncio.Queue[tuple[int, Event | BaseException | None]] = asyncio.Queue()
    pumps = [asyncio.ensure_future(_pump(index, run, queue)) for index, run in enumerate(runs)]
    reports: list[GenerationReport | None] = [None] * len(runs)
    try:
        running = len(runs)
        while running:
            index, item = await queue.get()
            if item is None:
                running -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, Finished):
                reports[index] = item.report
                record(item.report)
            for chunk in chunkers[index](item):
                if chunk.get("choices"):  # per-choice usage chunks give way to the one below
                    yield chunk
        if usage_base is not None:
            yield {**usage_base, "choices": [], "usage": choices_usage([r for r in reports if r is not None])}
    finally:
        for pump in pumps:
            pump.cancel()
        for run in runs:
            run.cancel()


async def _pump(index: int, run: ReplyRun, queue: asyncio.Queue[Any]) -> None:
    try:
        async for event in run_events(run):
            await queue.put((index, event))
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # the engine failed this choice: the stream says so
        await queue.put((index, exc))
    finally:
        await queue.put((index, None))
