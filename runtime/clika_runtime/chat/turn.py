"""The one turn path: what a turn needs before it reaches the engine, for every front end.

``generate`` and ``stream_generate``, :class:`~clika_runtime.chat.session.ChatSession`,
:class:`~clika_runtime.sessions.chat.AsyncChat` and the server all build their turns
with :func:`prepare_turn`: it decides the tool choice and its clash with a
``response_format``, renders the conversation, reads its images or audio
through the model's tower, tokenizes the prompt (with the caller's encoder: the
server's is bounded), makes the required call's grammar and the reply's parser,
and says whether special tokens stay in the reply text. What it refuses is a
:class:`~clika_runtime.engine.errors.TurnError` naming the field at fault, which
each front end words once (the server maps it to a status and a body).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.media_turns import split_audio, split_images
from clika_runtime.chat.model import supports_tools
from clika_runtime.chat.reply.parser import ReplyParser, keeps_special_tokens, reply_parser_for
from clika_runtime.chat.templates.render import render_prompt
from clika_runtime.chat.tools.choice import ToolChoice, chosen_tools, tool_choice_from
from clika_runtime.chat.tools.definitions import normalize_tools
from clika_runtime.chat.tools.grammar import required_call_constraint
from clika_runtime.engine.errors import TurnError, as_turn_error
from clika_runtime.engine.stages import StageEvent
from clika_runtime.grammar.constraint import GrammarError

if TYPE_CHECKING:
    from clika_runtime.chat.model import ChatModel
    from clika_runtime.chat.templates.chat_template import ChatTemplate
    from clika_runtime.engine.config import GenerationConfig
    from clika_runtime.engine.engine import Engine, RequestStream
    from clika_runtime.engine.prompt_media import PromptMedia
    from clika_runtime.grammar.constraint import Constraint

RENDERING = "the conversation cannot be rendered"
READING_IMAGES = "the images cannot be used"
READING_AUDIO = "the audio cannot be used"


@dataclass(frozen=True)
class Turn:
    """A turn ready for the engine: the prompt text, its token ids, the reply's parser, whether
    the reply keeps special tokens, the embeddings of the media the turn carries (None: a text
    prompt), the grammar that holds the reply to a call when the turn requires one, and the
    tools it offers under its tool choice (``template`` and ``tools`` make more parsers)."""

    prompt_text: str
    prompt_ids: list[int]
    parser: ReplyParser | None
    skip_special_tokens: bool = True
    media: PromptMedia | None = None
    call_constraint: Constraint | None = None
    tokenize_seconds: float = 0.0  # reading the rendered prompt into ids (its media included)
    tools: list[dict[str, Any]] | None = None
    template: ChatTemplate | None = None
    request_id: int | None = None  # the id its media stages were reported under, when it has one

    def policy_for(self, policy: GenerationConfig) -> GenerationConfig:
        """``policy`` with the required call's grammar as its ``response_format``."""
        if self.call_constraint is None:
            return policy
        return policy.overlay({"response_format": self.call_constraint})

    def new_parser(self) -> ReplyParser:
        """A fresh parser for another reply to this turn (one per choice of a request)."""
        return reply_parser_for(self.template, self.prompt_text, self.tools)


def check_chat_arguments(default_budget: int, system: str | None) -> None:
    """Raise ValueError unless ``default_budget`` is an integer >= 1 and ``system`` a string or None."""
    if isinstance(default_budget, bool) or not isinstance(default_budget, int) or default_budget < 1:
        raise ValueError(f"default_budget must be an integer >= 1, got {default_budget!r}")
    if system is not None and not isinstance(system, str):
        raise ValueError(f"system must be a string or None, got {type(system).__name__}")


def offered_tools(model: ChatModel, tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """``tools`` normalized; a ``tools`` TurnError when they are malformed or ``model`` takes none."""
    try:
        offered = normalize_tools(tools)
    except ValueError as exc:
        raise TurnError(str(exc), field="tools") from exc
    if offered and not supports_tools(model.chat_template):
        raise TurnError(
            "this model takes no tool definitions (its chat template has no tools slot); "
            "offer tools only to a model whose supports_tools is True",
            field="tools",
        )
    return offered


def prepare_turn(
    model: ChatModel,
    messages: Sequence[Mapping[str, Any]] | None,
    tools: list[dict[str, Any]] | None,
    policy: GenerationConfig,
    *,
    prompt: str | None = None,
    media: tuple[list[Any], list[Any]] | None = None,
    choice: ToolChoice | None = None,
    parallel: bool | None = None,
    encode: Callable[[str], list[int]] | None = None,
    request_id: int | None = None,
) -> Turn:
    """Render ``messages`` for ``model`` (or take ``prompt``, raw text, as it is), tokenize them
    (their images or audio through the model's tower: ``chat.media_turns``) and make the reply's parser.

    ``media``: the images and the clips, when the caller took them out of ``messages``
    already (otherwise the messages' own parts are read). ``choice``: the tool choice
    (default: ``policy.tool_choice``); "none" offers no tools; "required" or a named
    function holds the reply to a valid call (``parallel``, default
    ``policy.parallel_tool_calls``: one call or several). ``encode``: text to ids (default:
    the model's tokenizer). ``request_id``: the id media stages report under."""
    if choice is None:
        try:
            choice = tool_choice_from(policy.tool_choice, tools)
        except ValueError as exc:
            raise as_turn_error(exc, field="tool_choice") from exc
    tools = chosen_tools(tools, choice)
    template = model.chat_template
    text, images, audio = _prompt_and_media(model, messages, prompt, media, tools, policy)
    if choice.required and tools and policy.response_format is not None:
        raise TurnError(
            "a required tool call and a response_format cannot both hold the reply", field="tool_choice"
        )
    parallel = policy.parallel_tool_calls if parallel is None else parallel
    constraint = _call_constraint(model, text, tools, choice, parallel)
    began = time.perf_counter()
    ids, encoded = _encode(model, text, images, audio, encode or model.tokenizer.encode, request_id)
    return Turn(
        prompt_text=text,
        prompt_ids=ids,
        parser=None if messages is None else reply_parser_for(template, text, tools),
        skip_special_tokens=messages is None or not keeps_special_tokens(template, tools),
        media=encoded,
        call_constraint=constraint,
        tokenize_seconds=time.perf_counter() - began,
        tools=tools,
        template=template,
        request_id=request_id,
    )


def _prompt_and_media(
    model: ChatModel,
    messages: Sequence[Mapping[str, Any]] | None,
    prompt: str | None,
    media: tuple[list[Any], list[Any]] | None,
    tools: list[dict[str, Any]] | None,
    policy: GenerationConfig,
) -> tuple[str, list[Any], list[Any]]:
    """The prompt text (a marker where each item rides), its images and its clips in prompt order."""
    if messages is None:
        images, audio = media or ([], [])
        return prompt or "", images, audio
    if media is None:
        messages, images = split_images(messages)
        messages, audio = split_audio(messages)
    else:
        images, audio = media
    try:
        text = render_prompt(model.chat_template, messages, policy, tools=tools)
    except ValueError as exc:  # a TemplateError among them
        raise as_turn_error(exc, field="messages", context=RENDERING) from exc
    return text, images, audio


def _call_constraint(
    model: ChatModel, text: str, tools: list[dict[str, Any]] | None, choice: ToolChoice, parallel: bool
) -> Constraint | None:
    try:
        return required_call_constraint(
            model.chat_template, text, tools, choice, model.tokenizer, model.vocab_size, parallel=parallel
        )
    except GrammarError as exc:
        raise as_turn_error(exc, field="tools") from exc


def _encode(
    model: ChatModel,
    text: str,
    images: list[Any],
    audio: list[Any],
    encode: Callable[[str], list[int]],
    request_id: int | None,
) -> tuple[list[int], PromptMedia | None]:
    """``text`` as ids, its media markers expanded and their embeddings made (a ``messages``
    TurnError naming the media when they cannot be used)."""
    if images and audio:
        raise TurnError("a prompt takes images or audio, not both", field="messages")
    if not images and not audio:
        return encode(text), None
    supported = model.supports_vision if images else model.supports_audio
    if not supported:
        refusal = "this model reads text only; it takes no images" if images else "this model takes no audio"
        raise TurnError(refusal, field="messages")
    reader = model.encode_with_images if images else model.encode_with_audio
    try:
        return reader(text, images or audio, request_id=request_id)
    except ValueError as exc:
        raise as_turn_error(
            exc, field="messages", context=READING_IMAGES if images else READING_AUDIO
        ) from exc


def submit_turn(
    engine: Engine,
    turn: Turn,
    policy: GenerationConfig,
    *,
    skip_special_tokens: bool | None = None,
    detokenize: bool = True,
) -> RequestStream:
    """Submit a prepared turn to ``engine``, its ``tokenize`` stage reported to the engine's stage
    observer under the request's id first (``skip_special_tokens``: the caller's say over the turn's)."""
    request_id = engine.new_request_id() if turn.request_id is None else turn.request_id
    observer = engine.observer
    if observer is not None:
        observer(StageEvent("tokenize", request_id, turn.tokenize_seconds, len(turn.prompt_ids)))
    return engine.submit(
        turn.prompt_ids,
        turn.policy_for(policy),
        request_id=request_id,
        skip_special_tokens=turn.skip_special_tokens if skip_special_tokens is None else skip_special_tokens,
        detokenize=detokenize,
        media=turn.media,
    )
