"""Run a model folder's audio graph: mono waveforms in, text-width embeddings out.

``AudioTower.open`` reads the manifest's ``audio`` entry (the graph and the
feature extractor's settings); ``embed_audio`` checks the argument, turns each
clip into Whisper-style log-mel features, runs the graph once per clip (one
30 s chunk, the padding keys masked) and keeps the clip's own rows: one
``MediaEmbedding`` per clip, with the prompt text its ``<|AUDIO|>`` marker
expands to and a digest of its samples for the prefix cache's keys.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from clika_runtime.manifest import AudioSpec, Manifest, ManifestError
from clika_runtime.media.arguments import audio_arrays
from clika_runtime.media.audio_features import (
    encoder_attention_bias,
    encoder_tokens,
    log_mel_features,
    valid_frames,
)
from clika_runtime.media.audio_settings import settings_from_details
from clika_runtime.media.placeholders import qwen2_audio_text
from clika_runtime.media.vision_tower import EMBEDDING_CACHE_SIZE, MediaEmbedding, check_token_budget
from clika_runtime.model_folder import open_session, session_options

AUDIO_FAMILIES = ("qwen2_audio",)
# The Qwen2-Audio encoder's fixed input: 3000 feature frames (one chunk), 1500 positions after its conv.
_FRAMES = 3000


def audio_digest(samples: np.ndarray) -> str:
    """sha256 over the length and float32 samples: equal clips, equal keys (never an image's)."""
    digest = hashlib.sha256(f"audio{samples.shape}".encode())
    digest.update(np.ascontiguousarray(samples, dtype=np.float32).data)
    return digest.hexdigest()


class AudioTower:
    """A folder's audio graph with its feature extractor settings (one ORT session)."""

    def __init__(self, folder: Path, spec: AudioSpec, threads: int | None = None) -> None:
        if spec.family not in AUDIO_FAMILIES:
            raise ManifestError(
                f"audio family {spec.family!r} is not supported (supported: {AUDIO_FAMILIES})"
            )
        try:
            self.settings = settings_from_details(spec.details)
        except ValueError as exc:
            raise ManifestError(f"manifest {exc}") from None
        if self.settings.chunk_samples // self.settings.hop != _FRAMES:
            raise ManifestError(f"manifest audio.details give chunks of other than {_FRAMES} feature frames")
        self.spec = spec
        self.session = open_session(folder / spec.file, session_options(threads), ())  # no rotary tables
        names = [i.name for i in self.session.get_inputs()]
        if set(names) != set(spec.inputs) or set(names) != {"input_features", "attention_bias"}:
            raise ManifestError(f"{spec.file} takes {names}, the manifest names {list(spec.inputs)}")
        self._embedded: OrderedDict[str, MediaEmbedding] = OrderedDict()
        self._embedded_lock = threading.Lock()

    @classmethod
    def open(cls, folder: str | Path, *, threads: int | None = None) -> AudioTower:
        folder = Path(folder)
        manifest = Manifest.read(folder)
        if manifest.audio is None:
            raise ManifestError(f"{folder.name} has no audio graph: this model takes no audio")
        return cls(folder, manifest.audio, threads)

    def embed_audio(
        self, audio: Any, *, max_count: int | None = None, token_budget: int | None = None
    ) -> list[MediaEmbedding]:
        """One embedding per [S] clip (at the extractor's rate); ``token_budget``: prompt positions left."""
        clips = audio_arrays(audio, max_count=max_count)
        for i, clip in enumerate(clips):
            self._check_length(clip, f"audio[{i}]")
        return check_token_budget([self._cached(clip) for clip in clips], token_budget, "audio")

    def _check_length(self, clip: np.ndarray, where: str) -> None:
        s = self.settings
        if len(clip) > s.chunk_samples:
            raise ValueError(
                f"{where}: {len(clip) / s.sampling_rate:.2f} s of samples at {s.sampling_rate} Hz, longer "
                f"than the {s.chunk_seconds} s the audio encoder reads per clip; pass it as shorter clips"
            )
        if encoder_tokens(valid_frames(len(clip), s)) < 1:
            raise ValueError(f"{where}: {len(clip)} samples are too short to give one audio token")

    def _cached(self, clip: np.ndarray) -> MediaEmbedding:
        digest = audio_digest(clip)
        with self._embedded_lock:
            found = self._embedded.get(digest)
            if found is not None:
                self._embedded.move_to_end(digest)
                return dataclasses.replace(found, cached=True)
        embedding = self._embed(clip, digest)
        with self._embedded_lock:
            self._embedded[digest] = embedding
            while len(self._embedded) > EMBEDDING_CACHE_SIZE:
                self._embedded.popitem(last=False)
        return embedding

    def _embed(self, clip: np.ndarray, digest: str) -> MediaEmbedding:
        frames = valid_frames(len(clip), self.settings)
        feeds = {
            "input_features": log_mel_features(clip, self.settings)[None],
            "attention_bias": encoder_attention_bias(frames),
        }
        (out,) = self.session.run([self.spec.embeds_output], feeds)
        tokens = encoder_tokens(frames)
        embeds = np.ascontiguousarray(out[0, :tokens], dtype=np.float32)
        return MediaEmbedding(embeds, qwen2_audio_text(tokens), digest)
