"""A prompt's audio clips made ready for the engine: audio graph, audio tokens, embeddings.

``AudioPrompts`` belongs to a loaded model whose folder has an audio graph. It
takes a rendered prompt (one ``<|AUDIO|>`` marker per clip, where the chat
template put them, between ``<|audio_bos|>`` and ``<|audio_eos|>``) and the
clips in that order, runs the audio graph on them (the ``audio`` stage an
observer sees), expands each marker into one ``<|AUDIO|>`` per pooled encoder
frame as Qwen2AudioProcessor does (the family's marker and clip text, from
``media.families``), tokenizes the result and pairs the audio-token positions
with the embeddings (``PromptMedia``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from clika_runtime.contract.manifest import AudioSpec, ManifestError
from clika_runtime.engine.prompt_media import PromptMedia, prompt_media
from clika_runtime.media.audio_settings import settings_from_details
from clika_runtime.media.audio_tower import AudioTower
from clika_runtime.media.families import audio_family
from clika_runtime.media.media_prompts import MediaPrompts
from clika_runtime.media.placeholders import expand_markers

# Clips one request may carry (each is one 30 s chunk through the encoder at most).
MAX_CLIPS = 8


class AudioPrompts(MediaPrompts[AudioSpec, AudioTower]):
    """Prompts with audio for one model folder (its audio graph opened on first use)."""

    open_tower = AudioTower.open

    def _bind(self) -> None:
        family = audio_family(self.spec.family)
        self.marker = family.MARKER  # what the chat template emits for one clip
        self.clip_text = family.CLIP_TEXT  # what a prompt without a chat template gets in front per clip
        if self.spec.audio_token_id is None:
            raise ManifestError("the manifest's audio entry names no audio token id")
        if self.tokenizer.token_to_id(self.marker) != self.spec.audio_token_id:
            raise ManifestError(f"the tokenizer's {self.marker} is not the manifest's audio token id")
        try:
            self.sampling_rate = settings_from_details(self.spec.details).sampling_rate
        except ValueError as exc:
            raise ManifestError(f"manifest {exc}") from None

    def encode(
        self, text: str, audio: Sequence[Any], *, token_budget: int, request_id: int | None = None
    ) -> tuple[list[int], PromptMedia | None]:
        """Token ids of ``text`` with its markers expanded, and the clips' embeddings for them.

        ``token_budget``: the prompt positions the context window leaves; clips taking more are
        refused naming the clip that overflows (as are bad shapes, dtypes, lengths, too many).
        """
        began = time.perf_counter()
        embeddings = self.tower().embed_audio(audio, max_count=MAX_CLIPS, token_budget=token_budget)
        seconds = time.perf_counter() - began
        detail = {"clips": len(embeddings), "cached": sum(e.cached for e in embeddings)}
        self._observe("audio", request_id, seconds, sum(e.num_tokens for e in embeddings), detail)
        expanded = expand_markers(text, self.marker, [e.prompt_text for e in embeddings], argument="audio")
        ids = self.tokenizer.encode(expanded)
        audio_id = int(self.spec.audio_token_id)  # type: ignore[arg-type]
        media = prompt_media(ids, audio_id, [(e.embeds, e.digest) for e in embeddings], argument="audio")
        self._check_fits(ids, token_budget, "audio", "clips", "pass fewer or shorter clips")
        return ids, media
