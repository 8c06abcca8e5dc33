"""How ``GenerativeModel``'s calls become engine requests.

A prompt (one user message, or raw text without a chat template) or a
conversation, with its images, audio and videos, is checked and prepared as a
``Turn``, then submitted to the model's engine: one stream (``submit_given``)
or a batch whose prompts decode together (``run_batch``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from clika_runtime.chat.media_turns import (
    refuse_media_for,
    with_audio_on_last_user_turn,
    with_images_on_last_user_turn,
)
from clika_runtime.chat.model import ChatModel
from clika_runtime.chat.reply.outcome import ChatOutcome
from clika_runtime.chat.reply.streamed import collect_replies, submit_together
from clika_runtime.chat.tools.choice import ToolChoice
from clika_runtime.chat.turn import Turn, prepare_turn, submit_turn
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.engine import RequestStream
from clika_runtime.media.arguments import VideoInput


class RequestingModel(ChatModel, Protocol):
    """What a request needs of ``GenerativeModel`` beyond the chat layer's view of it: the prompt
    turn it reads a plain prompt and its media into (a protocol, so this module need not import
    the user API that calls it)."""

    def prompt_turn(self, prompt: Any, media: list[Any], audio: list[Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class GivenRequest:
    """What a stream call was given: a prompt or a conversation, its media, its decode knobs."""

    prompt: str | None
    messages: Sequence[Mapping[str, Any]] | None
    config: GenerationConfig | Mapping[str, Any] | None
    images: Sequence[Any]
    audio: Sequence[Any]
    videos: Sequence[Any]
    skip_special_tokens: bool
    overrides: Mapping[str, Any]


def model_turn(
    model: RequestingModel,
    prompt: Any,
    messages: Any,
    config: GenerationConfig,
    media: list[Any],
    audio: list[Any],
) -> Turn:
    """The turn ``prompt`` or ``messages`` makes with its media; ``generate`` offers no tools,
    whatever the config's choice."""
    if (prompt is None) == (messages is None):
        raise ValueError("pass either a prompt or messages= (exactly one of them)")
    if media and audio:
        raise ValueError("a prompt takes images or audio, not both")
    given = {"messages": messages} if messages is not None else model.prompt_turn(prompt, media, audio)
    request_id = model.engine.new_request_id()  # the media stages report under the request's id
    return prepare_turn(model, tools=None, policy=config, choice=ToolChoice(), request_id=request_id, **given)


def submit_given(model: RequestingModel, given: GivenRequest, *, detokenize: bool) -> RequestStream:
    """The one request path of the streams: ``given``'s prompt or messages with its images, audio
    and videos, checked, prepared and submitted to the model's engine."""
    images, audio, videos, messages = given.images, given.audio, given.videos, given.messages
    if given.prompt is not None and messages is not None:
        raise ValueError("pass either a prompt or messages= (exactly one of them), not both")
    refuse_media_for(model, images, audio, videos)
    cfg = GenerationConfig.resolve(model.defaults, given.config, given.overrides)
    if messages is not None and (images or videos):
        messages = with_images_on_last_user_turn(messages, images, videos)
    if messages is not None and audio:
        messages = with_audio_on_last_user_turn(messages, audio)
    media = [*images, *(VideoInput(video) for video in videos)]  # a turn's images, then its videos
    turn = model_turn(model, given.prompt, messages, cfg, media, list(audio))
    return submit_turn(
        model.engine, turn, cfg, skip_special_tokens=given.skip_special_tokens, detokenize=detokenize
    )


def run_batch(
    model: RequestingModel, prompts: Sequence[str], cfg: GenerationConfig, max_active: int | None
) -> tuple[list[str], list[ChatOutcome], Exception | None]:
    """Every prompt submitted before any reply is read; the replies, their outcomes and the first
    failure. The engine decodes all of them at once (never lowering its limit), or ``max_active``."""
    turns = [model_turn(model, prompt, None, cfg, [], []) for prompt in prompts]
    if not turns:
        return [], [], None
    engine = model.engine
    if max_active is None:
        engine.raise_limits(max_active=len(turns))
    else:
        engine.set_max_active(max_active)
    return collect_replies(submit_together(engine, turns, cfg))
