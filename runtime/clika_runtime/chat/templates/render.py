"""A model folder's chat template, and a conversation's prompt text: the template's rendering with a
request's reasoning switch folded in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.templates.chat_template import ChatTemplate
from clika_runtime.chat.templates.messages import plain_conversation_text

if TYPE_CHECKING:
    from clika_runtime.contract.model_folder import ModelFolder
    from clika_runtime.engine.config import GenerationConfig
    from clika_runtime.text.tokenizer import Tokenizer


def folder_template(folder: ModelFolder, tokenizer: Tokenizer) -> ChatTemplate | None:
    """The chat template ``folder`` ships (None: it has none), its special tokens set from
    ``tokenizer`` and probed now, so serving never waits on a render to describe the model."""
    if not folder.chat_template:
        return None
    specials = {
        k: v for k, v in (("bos_token", tokenizer.bos_token), ("eos_token", tokenizer.eos_token)) if v
    }
    return ChatTemplate(folder.chat_template, special_tokens=specials).probe()


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
