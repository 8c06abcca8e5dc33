"""Run a model folder's audio graph: mono waveforms in, text-width embeddings out.

``AudioTower.open`` reads the manifest's ``audio`` entry (the graph and the
feature extractor's settings); ``embed_audio`` checks the argument, has the
family (``media.families``; Qwen2-Audio: Whisper-style log-mel features of one
30 s chunk, the padding keys masked) run the graph once per clip and keep the
clip's own rows: one ``MediaEmbedding`` per clip, with the prompt text its
marker expands to and a digest of its samples for the prefix cache's keys.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from clika_runtime.contract.manifest import AudioSpec, Manifest, ManifestError
from clika_runtime.media.arguments import audio_arrays
from clika_runtime.media.audio_settings import settings_from_details
from clika_runtime.media.embedding import MediaEmbedding, check_token_budget
from clika_runtime.media.embedding_cache import EmbeddingCache
from clika_runtime.media.families import audio_family
from clika_runtime.media.tower_session import open_tower_session


def audio_digest(samples: np.ndarray) -> str:
    """sha256 over the length and float32 samples: equal clips, equal keys (never an image's)."""
    digest = hashlib.sha256(f"audio{samples.shape}".encode())
    digest.update(np.ascontiguousarray(samples, dtype=np.float32).data)
    return digest.hexdigest()


class AudioTower:
    """A folder's audio graph with its feature extractor settings (one ORT session)."""

    def __init__(self, folder: Path, spec: AudioSpec, threads: int | None = None) -> None:
        self.family = audio_family(spec.family)
        try:
            self.settings = settings_from_details(spec.details)
        except ValueError as exc:
            raise ManifestError(f"manifest {exc}") from None
        self.family.check_settings(self.settings)
        self.spec = spec
        self.session = open_tower_session(folder, spec, threads, self.family.INPUTS)
        self._cache = EmbeddingCache()

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
        if self.family.tokens(len(clip), s) < 1:
            raise ValueError(f"{where}: {len(clip)} samples are too short to give one audio token")

    def _cached(self, clip: np.ndarray) -> MediaEmbedding:
        digest = audio_digest(clip)
        return self._cache.one(digest, lambda: self._embed(clip, digest))

    def _embed(self, clip: np.ndarray, digest: str) -> MediaEmbedding:
        embeds, text = self.family.embed(self._run, clip, self.settings)
        return MediaEmbedding(embeds, text, digest)

    def _run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        (out,) = self.session.run([self.spec.embeds_output], feeds)
        return out
