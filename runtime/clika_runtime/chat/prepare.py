"""What a chat turn needs before it reaches the engine.

Shared by :class:`~clika_runtime.chat.session.ChatSession` and
:class:`~clika_runtime.sessions.chat.AsyncChat` so that both check their
arguments, offer tools and render a turn the same way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.media_turns import split_audio, split_images
from clika_runtime.chat.model import supports_tools
from clika_runtime.chat.render import render_prompt
from clika_runtime.chat.reply import ReplyParser, keeps_special_tokens, reply_parser_for
from clika_runtime.chat.tool_choice import chosen_tools, tool_choice_from
from clika_runtime.chat.tool_grammar import required_call_constraint
from clika_runtime.chat.tools import normalize_tools
from clika_runtime.engine.stages import StageEvent

if TYPE_CHECKING:
    from clika_runtime.chat.model import ChatModel
    from clika_runtime.engine.config import GenerationConfig
    from clika_runtime.engine.engine import Engine, RequestStream
    from clika_runtime.engine.prompt_media import PromptMedia
    from clika_runtime.grammar.constraint import Constraint


@dataclass(frozen=True)
class Prepared:
    """A turn ready for the engine: the prompt text, its token ids, the reply's parser, the
    embeddings of the images its user turns carry (None: a text prompt) and, when the turn
    requires a tool call, the grammar that holds the reply to one."""

    prompt_text: str
    prompt_ids: list[int]
    parser: ReplyParser
    skip_special_tokens: bool
    media: PromptMedia | None = None
    call_constraint: Constraint | None = None
    tokenize_seconds: float = 0.0  # reading the rendered prompt into ids (its media included)

    def policy_for(self, policy: GenerationConfig) -> GenerationConfig:
        """``policy`` with the required call's grammar as its ``response_format``."""
        if self.call_constraint is None:
            return policy
        return policy.overlay({"response_format": self.call_constraint})


def check_chat_arguments(default_budget: int, system: str | None) -> None:
    """Raise ValueError unless ``default_budget`` is an integer >= 1 and ``system`` a string or None."""
    if isinstance(default_budget, bool) or not isinstance(default_budget, int) or default_budget < 1:
        raise ValueError(f"default_budget must be an integer >= 1, got {default_budget!r}")
    if system is not None and not isinstance(system, str):
        raise ValueError(f"system must be a string or None, got {type(system).__name__}")


def offered_tools(model: ChatModel, tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """``tools`` normalized; ValueError when ``model`` takes none."""
    offered = normalize_tools(tools)
    if offered and not supports_tools(model.chat_template):
        raise ValueError(
            "this model takes no tool definitions (its chat template has no tools slot); "
            "offer tools only to a model whose supports_tools is True"
        )
    return offered


def prepare_turn(
    model: ChatModel,
    messages: Sequence[Mapping[str, Any]],
    tools: list[dict[str, Any]] | None,
    policy: GenerationConfig,
) -> Prepared:
    """Render ``messages`` for ``model``, tokenize them (their images or audio through the model's
    tower: ``chat.media_turns``) and make the reply's parser.

    ``policy.tool_choice`` "none" offers no tools; "required" or a named function holds the
    reply to a valid call (``policy.parallel_tool_calls``: one call or several)."""
    template = model.chat_template
    choice = tool_choice_from(policy.tool_choice, tools)
    tools = chosen_tools(tools, choice)
    if choice.required and policy.response_format is not None:
        raise ValueError("a required tool call and a response_format cannot both hold the reply")
    rendered, images = split_images(messages)
    rendered, audio = split_audio(rendered)
    text = render_prompt(template, rendered, policy, tools=tools)
    media = None
    if images and audio:
        raise ValueError("a prompt takes images or audio, not both")
    began = time.perf_counter()
    if images:
        if not model.supports_vision:
            raise ValueError("this model reads text only; it takes no images")
        ids, media = model.encode_with_images(text, images)
    elif audio:
        if not model.supports_audio:
            raise ValueError("this model takes no audio")
        ids, media = model.encode_with_audio(text, audio)
    else:
        ids = model.tokenizer.encode(text)
    tokenized = time.perf_counter() - began
    constraint = required_call_constraint(
        template, text, tools, choice, model.tokenizer, model.vocab_size, parallel=policy.parallel_tool_calls
    )
    return Prepared(
        prompt_text=text,
        prompt_ids=ids,
        parser=reply_parser_for(template, text, tools),
        skip_special_tokens=not keeps_special_tokens(template, tools),
        media=media,
        call_constraint=constraint,
        tokenize_seconds=tokenized,
    )


def submit_prepared(engine: Engine, prepared: Prepared, policy: GenerationConfig) -> RequestStream:
    """Submit a prepared turn to ``engine``, its ``tokenize`` stage reported to the engine's stage
    observer under the request's id first (as ``generate`` reports its own)."""
    request_id = engine.new_request_id()
    observer = engine.observer
    if observer is not None:
        tokens = len(prepared.prompt_ids)
        observer(StageEvent("tokenize", request_id, prepared.tokenize_seconds, tokens))
    return engine.submit(
        prepared.prompt_ids,
        prepared.policy_for(policy),
        request_id=request_id,
        skip_special_tokens=prepared.skip_special_tokens,
        media=prepared.media,
    )
