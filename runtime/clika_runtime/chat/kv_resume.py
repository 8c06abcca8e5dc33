"""A conversation's KV kept on disk beside its transcript, so a new process resumes it without re-reading.

Saving takes the conversation's tokens as its next turn will start (the history
rendered without the assistant's turn opened), makes sure the model's cache
holds KV for all of them (a one-token request computes only the part no
earlier turn left there), and writes a snapshot of that KV
(``clika_runtime.engine.kv.kv_file``). Restoring reads the file, checks it is KV of
this model, keeps the part whose tokens the transcript still starts with, and
installs it in the cache as the cached prefix of those tokens: the next turn's
request finds it there and reports it as ``cached_tokens``. A conversation's
images are expanded and embedded as a turn's are, and its KV is keyed as the
caches key it (each image position by the image's sha256), so a restored image
is served from the cache on the next turn like its text; audio clips likewise.

A missing, damaged, truncated or foreign file is never an error of the turn: the
problem is logged and the turn prefills as usual. Snapshots need a cache that
takes them; both KV modes do, at either KV dtype.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.media_turns import split_audio, split_images
from clika_runtime.chat.templates.render import render_prompt
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.kv.kv_file import KVFileError, KVLayout, read_kv_file, write_kv_file
from clika_runtime.engine.kv.kv_snapshot import KVSnapshot

if TYPE_CHECKING:
    from clika_runtime.chat.model import ChatModel
    from clika_runtime.engine.core import EngineCore
    from clika_runtime.engine.engine import Engine
    from clika_runtime.engine.prompt_media import PromptMedia

log = logging.getLogger("clika_runtime.kv_resume")


@dataclass(frozen=True)
class ConversationPrompt:
    """A conversation's tokens as its next turn starts with them, and the media they hold."""

    token_ids: list[int]  # what the model reads (each image's marker expanded to its tokens)
    media: PromptMedia | None = None  # the images' embeddings for their positions (None: text)

    @property
    def cache_ids(self) -> list[int]:
        """The ids the caches (and a KV file) hold: each media position keyed by its image's sha256."""
        return self.token_ids if self.media is None else self.media.keyed(self.token_ids)


def conversation_prompt(
    model: ChatModel,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    policy: GenerationConfig,
) -> ConversationPrompt:
    """What every next turn of ``messages`` starts with (no assistant turn opened); the images its
    turns carry are expanded and embedded as a turn's are (``chat.turn``)."""
    if not messages:
        return ConversationPrompt([])
    rendered, images = split_images(messages)
    rendered, audio = split_audio(rendered)
    text = render_prompt(model.chat_template, rendered, policy, add_generation_prompt=False, tools=tools)
    if audio and not images:
        if not model.supports_audio:
            raise ValueError("this model takes no audio; the conversation holds audio")
        ids, media = model.encode_with_audio(text, audio)
        return ConversationPrompt(ids, media)
    if not images:
        return ConversationPrompt(model.tokenizer.encode(text))
    if not model.supports_vision:
        raise ValueError("this model reads text only; the conversation holds images")
    ids, media = model.encode_with_images(text, images)
    return ConversationPrompt(ids, media)


def conversation_tokens(
    model: ChatModel,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    policy: GenerationConfig,
) -> list[int]:
    """The tokens every next turn of ``messages`` starts with (no assistant turn opened)."""
    return conversation_prompt(model, messages, tools, policy).token_ids


def kv_layout(model: ChatModel, engine: Engine) -> KVLayout:
    """What a KV file must hold for ``engine`` (over ``model``) to install it."""
    cache = engine.cache
    shape = cache.shape  # type: ignore[attr-defined]  # both KV caches have one
    return KVLayout(
        model_key=model.kv_key,
        dtype=str(shape.dtype),
        num_layers=shape.num_layers,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        max_tokens=min(model.max_seq, cache.token_capacity),
    )


def save_kv(model: ChatModel, engine: Engine, prompt: ConversationPrompt, path: str | Path) -> int:
    """Write the KV ``engine`` holds of ``prompt`` to ``path`` (atomically), computing what it
    lacks; how many tokens it holds (0: none written, no tokens or a cache that keeps no prefixes)."""
    keyed = prompt.cache_ids
    if not keyed:
        return 0
    snapshot = engine.between_steps(lambda core: _snapshot(core, keyed))
    if snapshot is None or snapshot.num_tokens < len(keyed):
        # Computes the KV of every token (the cached part is reused), then keeps it cached.
        config = GenerationConfig(max_new_tokens=1)
        engine.submit(prompt.token_ids, config, detokenize=False, media=prompt.media).result()
        snapshot = engine.between_steps(lambda core: _snapshot(core, keyed))
    if snapshot is None:
        return 0
    write_kv_file(path, snapshot, kv_layout(model, engine))
    return snapshot.num_tokens


def restore_kv(model: ChatModel, engine: Engine, prompt: ConversationPrompt, path: str | Path) -> int:
    """Install the KV in ``path`` in ``engine``'s cache for the part of ``prompt`` it holds; how
    many tokens the cache now holds from it. 0, with a log line saying why, when it cannot be used."""
    path = Path(path)
    keyed = prompt.cache_ids
    if not keyed:
        return 0
    if not path.is_file():
        log.info("no saved KV at %s: the conversation is read again", path)
        return 0
    try:
        snapshot = read_kv_file(path, kv_layout(model, engine))
    except KVFileError as exc:
        log.warning("saved KV not used (%s): the conversation is read again", exc)
        return 0
    shared = _common_prefix(snapshot.token_ids, keyed)
    if shared < snapshot.num_tokens:
        log.warning(
            "saved KV at %s holds %d tokens, of which the conversation still starts with %d: "
            "those are restored, the rest is read again",
            path,
            snapshot.num_tokens,
            shared,
        )
        snapshot = _prefix(snapshot, shared)
    if not shared:
        return 0
    return engine.between_steps(lambda core: core.cache.install(snapshot))


def _snapshot(core: EngineCore, token_ids: list[int]) -> KVSnapshot | None:
    return core.cache.snapshot(token_ids)


def _prefix(snapshot: KVSnapshot, n: int) -> KVSnapshot:
    return KVSnapshot(
        snapshot.token_ids[:n], [k[:, :n] for k in snapshot.keys], [v[:, :n] for v in snapshot.values]
    )


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
