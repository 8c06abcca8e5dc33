"""What an engine refuses to run: a prompt it cannot hold, options it cannot honour, media it
cannot place. Checked on the caller's thread, before the request reaches the engine's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.errors import CONTEXT_LENGTH_EXCEEDED, TurnError
from clika_runtime.engine.prompt_media import PromptMedia


@dataclass(frozen=True)
class RequestLimits:
    """An engine's limits as its checks read them: the context window, the tokens its KV cache
    holds for one request, the vocabulary, the drafters it has."""

    max_seq: int
    token_capacity: int
    vocab_size: int
    drafters: frozenset[str]


def checked_prompt(
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    media: PromptMedia | None,
    limits: RequestLimits,
    executor: Any,
) -> tuple[int, ...]:
    """``prompt_ids`` as a tuple, or ValueError naming what an engine within ``limits`` (running
    ``executor``) cannot run; a TurnError where it names an option or the context window."""
    prompt = tuple(int(t) for t in prompt_ids)
    if media is not None:
        check_media(media, len(prompt), executor)
    if not prompt:
        raise ValueError("the prompt is empty: there is nothing to continue")
    if len(prompt) >= limits.max_seq:
        raise TurnError(
            f"the prompt has {len(prompt)} tokens; the context window is {limits.max_seq} tokens "
            f"and the reply needs room for at least one more",
            code=CONTEXT_LENGTH_EXCEEDED,
        )
    if len(prompt) >= limits.token_capacity:
        raise ValueError(
            f"the prompt has {len(prompt)} tokens; the KV cache holds at most "
            f"{limits.token_capacity} tokens of one request and the reply needs room for one more"
        )
    bad = [t for t in prompt if not 0 <= t < limits.vocab_size]
    if bad:
        raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary (0..{limits.vocab_size - 1})")
    bad = [t for t in config.stop_token_ids if t >= limits.vocab_size]
    if bad:
        raise ValueError(
            f"stop_token_ids holds {bad[0]}, outside the vocabulary (0..{limits.vocab_size - 1})"
        )
    if config.num_assistant_tokens and "assistant" not in limits.drafters:
        raise TurnError(
            "num_assistant_tokens needs an assistant model: attach one with set_assistant() "
            "or load(..., assistant_model=)",
            field="num_assistant_tokens",
        )
    return prompt


def check_media(media: PromptMedia, prompt_len: int, executor: Any) -> None:
    """ValueError unless ``executor``'s step graph takes ``media`` where they lie in the prompt."""
    if not getattr(executor, "takes_media", False):
        raise ValueError("images: this model reads text only (its step graph takes no media embeddings)")
    width = getattr(executor, "media_width", None)
    if width is not None and media.hidden_size != width:
        raise ValueError(f"images: the embeddings are {media.hidden_size} wide, the model takes {width}")
    if len(media.positions) and not 0 <= int(media.positions[0]) <= int(media.positions[-1]) < prompt_len:
        raise ValueError("images: a media position lies outside the prompt")
    mrope = bool(getattr(executor, "takes_mrope", False))
    if mrope and media.rope is None:
        raise ValueError("images: this model rotates by M-RoPE and the media carry no rotary positions")
    if media.rope is not None and not mrope:
        raise ValueError(
            "images: the media carry M-RoPE positions, which this model's step graph does not take"
        )
    if media.rope is not None and media.rope.prompt_len != prompt_len:
        raise ValueError(
            f"images: the media's rotary positions are for a {media.rope.prompt_len}-token prompt, "
            f"not this {prompt_len}-token one"
        )
