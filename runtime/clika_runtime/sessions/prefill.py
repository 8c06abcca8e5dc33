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
from typing import TYPE_CHECKING, Any

from clika_runtime.engine.types import GenerationConfig

if TYPE_CHECKING:
    from clika_runtime.sessions.chat import AsyncChat

# Marks where the partial text ends in the rendered prompt; no template or text holds it.
_END_OF_INPUT = "\u2063\ue000clika-input-end\ue000\u2063"
_WARM_UP = {"max_new_tokens": 1, "temperature": 0.0}


def partial_prompt_ids(
    chat: AsyncChat,
    history: Sequence[Mapping[str, Any]],
    partial_text: str,
    tools: list[dict[str, Any]] | None,
    policy: GenerationConfig,
) -> list[int]:
    """The prompt tokens a turn starting with ``partial_text`` is sure to begin with ([] when the
    template does not keep the text as it was given)."""
    messages = [*history, {"role": "user", "content": partial_text + _END_OF_INPUT}]
    prepared = chat.prepare(messages, tools, policy)
    cut = prepared.prompt_text.find(_END_OF_INPUT)
    if cut < 0:
        return []
    ids = chat.model.tokenizer.encode(prepared.prompt_text[:cut])
    return list(ids[:-1])


async def prefill_partial_turn(
    chat: AsyncChat,
    history: Sequence[Mapping[str, Any]],
    partial_text: str,
    tools: list[dict[str, Any]] | None,
    policy: GenerationConfig,
) -> int:
    """Compute the KV of the prompt so far on the chat's engine; returns how many tokens it
    covers (0 when nothing could be prefilled, for example a prompt already past the context)."""
    loop = asyncio.get_running_loop()
    ids = await loop.run_in_executor(None, partial_prompt_ids, chat, history, partial_text, tools, policy)
    if not ids:
        return 0
    try:
        request = chat.engine.submit(ids, policy.overlay(_WARM_UP))
    except ValueError:  # longer than the context: the turn itself will say so
        return 0
    await loop.run_in_executor(None, request.result)
    return len(ids)
