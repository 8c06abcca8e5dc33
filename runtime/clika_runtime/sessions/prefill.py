"""Prefilling a user turn while it is still being written.

A turn whose text arrives in pieces (an input queue, a user still typing) can
have the KV of what has arrived computed before the turn is complete: the
conversation is rendered with the partial user text, cut where that text
ends, and the tokens before the cut are run through the engine as a
one-token request. The cache keeps them (a freed continuous slot, or paged
blocks in the prefix cache) and the turn's real request, whose prompt starts
with the same tokens, skips computing them. The last token before the cut is
left out: more text may merge into it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from clika_runtime.chat.turn import Turn
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.engine import RequestStream

# Marks where the partial text ends in the rendered prompt; no template or text holds it.
_END_OF_INPUT = "\u2063\ue000clika-input-end\ue000\u2063"
_WARM_UP = {"max_new_tokens": 1, "temperature": 0.0}


class PrefillHost(Protocol):
    """What prefilling needs of the chat a session belongs to (an ``AsyncChat``)."""

    def prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None,
        policy: GenerationConfig,
    ) -> Turn: ...

    def encode(self, text: str) -> list[int]: ...

    def submit(self, prepared: Turn, policy: GenerationConfig) -> RequestStream: ...


def partial_prompt(
    host: PrefillHost,
    history: Sequence[Mapping[str, Any]],
    partial_text: str,
    tools: list[dict[str, Any]] | None,
    policy: GenerationConfig,
) -> Turn | None:
    """The prompt a turn starting with ``partial_text`` is sure to begin with (None when the
    template does not keep the text as it was given, or nothing is sure yet)."""
    messages = [*history, {"role": "user", "content": partial_text + _END_OF_INPUT}]
    prepared = host.prepare(messages, tools, policy)
    cut = prepared.prompt_text.find(_END_OF_INPUT)
    if cut < 0:
        return None
    ids = host.encode(prepared.prompt_text[:cut])[:-1]
    return replace(prepared, prompt_text=prepared.prompt_text[:cut], prompt_ids=ids) if ids else None


async def prefill_partial_turn(
    host: PrefillHost,
    history: Sequence[Mapping[str, Any]],
    partial_text: str,
    tools: list[dict[str, Any]] | None,
    policy: GenerationConfig,
) -> int:
    """Compute the KV of the prompt so far on the chat's engine; returns how many tokens it
    covers (0 when nothing could be prefilled, for example a prompt already past the context)."""
    loop = asyncio.get_running_loop()
    prepared = await loop.run_in_executor(None, partial_prompt, host, history, partial_text, tools, policy)
    if prepared is None:
        return 0
    try:
        request = host.submit(prepared, policy.overlay(_WARM_UP))
    except ValueError:  # longer than the context: the turn itself will say so
        return 0
    await loop.run_in_executor(None, request.result)
    return len(prepared.prompt_ids)
