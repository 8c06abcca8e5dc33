"""A conversation's prompt text: the chat template's rendering with a request's reasoning switch folded in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.templates import plain_conversation_text

if TYPE_CHECKING:
    from clika_runtime.chat.templates import ChatTemplate
    from clika_runtime.engine.config import GenerationConfig


def render_prompt(
    template: ChatTemplate | None,
    messages: Sequence[Mapping[str, Any]],
    policy: GenerationConfig,
    *,
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """The prompt ``template`` renders for ``messages`` (``tools`` offered; ``policy``'s
    ``enable_thinking`` / ``reasoning_effort`` fold into its variables); without a template,
    ``role: content`` lines with the assistant's turn opened."""
    if template is None:
        if tools:
            raise ValueError("this model has no chat template, so it takes no tool definitions")
        return plain_conversation_text(messages)
    return template.render(
        messages,
        add_generation_prompt=add_generation_prompt,
        tools=tools,
        enable_thinking=policy.enable_thinking,
        reasoning_effort=policy.reasoning_effort,
    )
