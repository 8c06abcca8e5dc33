"""What the chat layer needs of a loaded model: a small protocol, so it never imports the public API.

``clika_runtime.modelverse.GenerativeModel`` is one. The chat layer renders
prompts itself (``clika_runtime.chat.templates.render``) from the model's template and
tokenizer, and submits turns to the model's engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from clika_runtime.chat.templates.chat_template import ChatTemplate
    from clika_runtime.engine.config import GenerationConfig
    from clika_runtime.engine.engine import Engine
    from clika_runtime.engine.prompt_media import PromptMedia
    from clika_runtime.text.tokenizer import Tokenizer


# A prompt read with its media: the token ids and the media's embeddings by prompt position.
Encoded = tuple[list[int], "PromptMedia | None"]


class ChatModel(Protocol):
    """A loaded model as the chat layer sees it."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def chat_template(self) -> ChatTemplate | None: ...

    @property
    def defaults(self) -> GenerationConfig: ...

    @property
    def max_seq(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def kv_key(self) -> str:
        """What saved KV must name to be read by this model (``clika_runtime.chat.kv_resume``)."""
        ...

    def raise_limits(self, *, max_active: int | None = None, max_queued: int | None = None) -> None: ...

    @property
    def supports_vision(self) -> bool: ...

    @property
    def supports_video(self) -> bool: ...

    def encode_with_images(
        self, text: str, images: Sequence[Any], *, request_id: int | None = None
    ) -> Encoded:
        """``text`` (with one image marker per image) as token ids, each marker expanded to its
        image's tokens, and the images' embeddings for them (``request_id``: the stage's)."""
        ...

    @property
    def supports_audio(self) -> bool: ...

    def encode_with_audio(self, text: str, audio: Sequence[Any], *, request_id: int | None = None) -> Encoded:
        """``text`` (with one audio marker per clip) as token ids, each marker expanded to its
        clip's tokens, and the clips' embeddings for them."""
        ...


def supports_tools(template: ChatTemplate | None) -> bool:
    """True when the chat template takes tool definitions."""
    return template is not None and template.supports_tools


def reasoning_mode(template: ChatTemplate | None) -> str:
    """How the reasoning channel behaves ("never" without a template)."""
    return template.reasoning_mode if template is not None else "never"


@dataclass(frozen=True)
class ChatCard:
    """What a chat engine advertises about its model."""

    model_id: str
    context_window: int
    has_chat_template: bool
    supports_tools: bool
    tool_call_format: str | None
    template_renders_tools: bool
    reasoning_mode: str
    supports_thinking: bool


def chat_card(model: ChatModel, model_id: str = "") -> ChatCard:
    """The card of ``model`` (``model_id`` names it to clients, e.g. in an OpenAI ``model`` field)."""
    template = model.chat_template
    tools = supports_tools(template)
    mode = reasoning_mode(template)
    return ChatCard(
        model_id=model_id,
        context_window=model.max_seq,
        has_chat_template=template is not None,
        supports_tools=tools,
        tool_call_format=template.tool_call_format if tools and template is not None else None,
        template_renders_tools=template is not None and template.renders_tools,
        reasoning_mode=mode,
        supports_thinking=mode != "never",
    )
