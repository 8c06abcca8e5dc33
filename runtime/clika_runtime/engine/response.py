"""``GenerationResponse``: the one chunk type of a streamed reply, and the chunks a request's
stream makes (each delta's text piece and token ids; the last chunk says how the reply ended)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from clika_runtime.engine.engine import RequestStream
from clika_runtime.engine.output import Delta
from clika_runtime.engine.report import GenerationReport


@dataclass(frozen=True)
class GenerationResponse:
    """One chunk of a streamed reply (the shape of mlx-lm's ``stream_generate`` chunks).

    ``text`` is what the chunk made visible: ``""`` while a character or a
    possible stop string is held back, or for a stop id; the pieces join to the
    whole reply. ``token_ids`` are the ids the chunk carries (none for the text
    held back until the end). ``finish_reason`` and ``report`` are None on every
    chunk but the last, which carries the request's :class:`GenerationReport`.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None = None
    report: GenerationReport | None = None


def responses_of(stream: RequestStream) -> Iterator[GenerationResponse]:
    """``stream``'s deltas as responses, one per delta, then the end on the last one.

    A delta is handed over as soon as it arrives; only one whose end already
    waits behind it is held to carry the report. When the end comes after the
    last delta was handed over, a final chunk with no text and no ids carries it,
    so the last chunk always has the report (a request ended before its first
    token gives that chunk alone).
    """
    deltas = iter(stream)
    try:
        held = next(deltas, None)
        while held is not None:
            if not stream.ready:  # nothing behind it yet: waiting for the next step would delay it
                yield _piece(held)
                held = next(deltas, None)
                continue
            following = next(deltas, None)  # already waiting: this does not block
            if following is None:
                yield _last(held.text, held.token_ids, stream)
                return
            yield _piece(held)
            held = following
        yield _last("", (), stream)
    finally:
        deltas.close()  # type: ignore[attr-defined]


def _piece(delta: Delta) -> GenerationResponse:
    return GenerationResponse(delta.text, delta.token_ids)


def _last(text: str, token_ids: tuple[int, ...], stream: RequestStream) -> GenerationResponse:
    report = stream.report  # set before the end reaches the stream's queue
    assert report is not None
    return GenerationResponse(text, token_ids, report.finish_reason, report)
