"""Which continuous-cache slot serves a prompt: the longest prefix of it whose KV a slot holds.

A free slot keeps the token ids its KV still holds (``held``); a running slot
holds its sequence's computed tokens. Both compare against the prompt up to
``reuse_limit``, so a prompt's last tokens are always computed again.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from clika_runtime.engine.kv.kv_cache import reuse_limit
from clika_runtime.engine.sequence import Sequence


def shared_length(held: np.ndarray, wanted: np.ndarray, limit: int | None = None) -> int:
    """How many leading tokens ``held`` and ``wanted`` share (at most ``limit``)."""
    n = min(len(held), len(wanted)) if limit is None else min(limit, len(held), len(wanted))
    differ = np.flatnonzero(held[:n] != wanted[:n])
    return int(differ[0]) if differ.size else n


def best_free_slot(
    free: list[int], held: Mapping[int, np.ndarray], prompt: np.ndarray, *, prefix_reuse: bool
) -> tuple[int, int, int]:
    """``(slot, tokens reused, slot to copy them from or -1)`` for ``prompt``.

    A free slot whose whole history starts the prompt (the conversation's own previous
    turn) is taken as it is. A slot that shares only part of its history holds another
    conversation: with an empty slot to spare, the shared prefix is copied into that one
    instead, so both histories stay reusable (eight chat sessions on one engine each keep
    their own). Otherwise the longest shared prefix wins; without one, an empty slot, else
    the least recently freed one.
    """
    empty = [slot for slot in free if slot not in held]
    fallback = empty[0] if empty else free[0]
    if not prefix_reuse:
        return fallback, 0, -1
    limit = reuse_limit(len(prompt))
    own, own_shared, other, other_shared = -1, 0, -1, 0
    for slot in free:
        tokens = held.get(slot)
        if tokens is None:
            continue
        shared = shared_length(tokens, prompt, limit)
        if shared == min(limit, len(tokens)) and shared > own_shared:
            own, own_shared = slot, shared
        elif shared > other_shared:
            other, other_shared = slot, shared
    if own >= 0 and own_shared >= other_shared:
        return own, own_shared, -1
    if other >= 0 and empty:
        return empty[0], other_shared, other
    if other >= 0:
        return other, other_shared, -1
    return (own, own_shared, -1) if own >= 0 else (fallback, 0, -1)


def best_running_prefix(running: Mapping[int, Sequence], prompt: np.ndarray) -> tuple[int, int]:
    """The running slot whose computed tokens share the longest prefix with ``prompt``."""
    best_slot, best = -1, 0
    limit = reuse_limit(len(prompt))
    for slot, seq in running.items():
        n = min(limit, seq.num_computed_tokens)
        shared = shared_length(np.asarray(seq.cache_ids[:n], dtype=np.int64), prompt, n)
        if shared > best:
            best_slot, best = slot, shared
    return best_slot, best
