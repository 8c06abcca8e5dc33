"""What storing media does to a transcript's content parts, whatever the kind (over the one walk of
:mod:`clika_runtime.media.content_parts`).

``stored_media`` (images, video frames) and ``stored_audio`` (clips) both
replace the media parts of a transcript (by their digests before a save, by
their data after a read) and collect the digests a stored transcript names;
only what a part holds and how it is checked differ, and those stay in each
kind's module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clika_runtime.media.content_parts import replaced_parts


@dataclass(frozen=True)
class StoredPartKind:
    """One kind of media part a store keeps apart from the transcript: which parts hold data,
    how one is named by its digests (and its arrays collected) or given its data back, and the
    digests a stored part names. Its methods are that kind's detach / digests / attach."""

    holds_data: Callable[[Any], bool]
    detach_part: Callable[[Mapping[str, Any], str, int, dict[str, np.ndarray]], dict]
    attach_part: Callable[[Mapping[str, Any], Callable[[str], np.ndarray | None], str], dict]
    digests_of: Callable[[Any], list[str]]
    max_bytes: int

    def detach(
        self, messages: Sequence[Mapping[str, Any]], max_bytes: int | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
        """``messages`` with each part of this kind replaced by its digests, and its arrays by
        digest. A part holding no valid data, or an array over ``max_bytes`` (default: the
        kind's bound), raises the kind's error naming the part."""
        bound = self.max_bytes if max_bytes is None else max_bytes
        return detached_parts(
            messages, self.holds_data, lambda part, where, data: self.detach_part(part, where, bound, data)
        )

    def digests(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """The digests a stored transcript's parts of this kind name, in order, each once."""
        return named_digests(messages, self.digests_of)

    def attach(
        self, messages: list[dict[str, Any]], data_of: Callable[[str], np.ndarray | None]
    ) -> list[dict[str, Any]]:
        """A stored transcript with each part of this kind given its data back (``data_of(digest)``);
        a digest the store lacks raises the kind's error naming the part."""
        return replaced_parts(
            messages,
            lambda part: bool(self.digests_of(part)),
            lambda part, where: self.attach_part(part, data_of, where),
        )


def detached_parts(
    messages: Any,
    holds_data: Callable[[Any], bool],
    detach: Callable[[Mapping[str, Any], str, dict[str, np.ndarray]], dict],
) -> tuple[Any, dict[str, np.ndarray]]:
    """``messages`` with each part ``holds_data`` picks replaced by ``detach(part, where, data)``,
    which names it and adds its arrays to ``data`` by digest; and that ``data``. What is no list of
    messages comes back as it is (the transcript check names it)."""
    data: dict[str, np.ndarray] = {}
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        return messages, data
    return replaced_parts(messages, holds_data, lambda part, where: detach(part, where, data)), data


def named_digests(
    messages: Sequence[Mapping[str, Any]], digests_of: Callable[[Any], Iterable[str]]
) -> list[str]:
    """The digests ``digests_of(part)`` finds in a stored transcript's parts, in order, each once."""
    seen: dict[str, None] = {}
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        for part in content if isinstance(content, list) else ():
            for digest in digests_of(part):
                seen.setdefault(digest, None)
    return list(seen)


def checked_array(
    check: Callable[..., list[Any]], value: Any, where: str, error: Callable[[str], Exception]
) -> Any:
    """The one value ``check([value], argument=where)`` gives back; its complaint raised as
    ``error``, naming the part ``where`` (not ``where[0]``)."""
    try:
        [checked] = check([value], argument=where)
    except (TypeError, ValueError) as exc:
        raise error(str(exc).replace(f"{where}[0]", where)) from None
    return checked


def held(
    data_of: Callable[[str], np.ndarray | None],
    digest: str,
    where: str,
    noun: str,
    error: Callable[[str], Exception],
) -> np.ndarray:
    """The data a store holds for ``digest``; one it lacks raises ``error`` naming the part."""
    found = data_of(digest)
    if found is None:
        raise error(
            f"{where} names {noun} {digest[:16]}..., which the store does not hold (a damaged store?)"
        )
    return found
