"""The Qwen2-Audio encoder exported to ONNX against transformers, from raw audio.

A tiny random Qwen2-Audio checkpoint is built here; a 2.5 s clip becomes
log-mel features (ours, NumPy) and goes through our graph with the padding
keys masked, and through transformers' encoder and projector with its own
mask; the clip's rows must match within 1e-3 of scale.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from audio_signals import speech_like
from support.lazy import torch, transformers
from vision_helpers import assert_close_in_scale, widen

from clika_export.media.audio_export import export_audio
from clika_runtime.media.audio_features import (
    AudioSettings,
    encoder_attention_bias,
    encoder_tokens,
    log_mel_features,
    valid_frames,
)


@pytest.fixture(scope="module")
def qwen2_audio(tmp_path_factory):
    config = transformers.Qwen2AudioConfig(
        audio_config=dict(d_model=32, encoder_attention_heads=4, encoder_layers=2, encoder_ffn_dim=64, num_mel_bins=80),
        text_config=dict(
            hidden_size=48, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=320,
        ),
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2AudioForConditionalGeneration(config).eval()
    widen(model)
    folder = tmp_path_factory.mktemp("qwen2-audio-hf")
    model.save_pretrained(folder)
    return model, folder


def _reference(model, features: np.ndarray, keys: int) -> np.ndarray:
    """transformers' encoder + projector with the padding keys masked as its model forward does."""
    mask = torch.zeros((1, 1, 1500, 1500))
    mask[..., keys:] = torch.finfo(torch.float32).min
    with torch.no_grad():
        hidden = model.model.audio_tower(
            torch.from_numpy(features)[None], attention_mask=mask
        ).last_hidden_state
        return model.model.multi_modal_projector(hidden)[0].numpy()


def test_qwen2_audio_embeddings_match_transformers(qwen2_audio, tmp_path):
    model, folder = qwen2_audio
    spec = export_audio(folder, tmp_path)
    assert spec.details["n_mels"] == 80 and spec.text_hidden_size == 48 and spec.family == "qwen2_audio"
    settings = AudioSettings(n_mels=80)
    wave = speech_like(2.5, seed=3)
    features = log_mel_features(wave, settings)
    frames = valid_frames(len(wave), settings)
    session = ort.InferenceSession(str(tmp_path / spec.file), providers=["CPUExecutionProvider"])
    (ours,) = session.run(
        [spec.embeds_output],
        {"input_features": features[None], "attention_bias": encoder_attention_bias(frames)},
    )
    tokens = encoder_tokens(frames)
    assert (frames, tokens) == (250, 62)
    # The frame count is the extractor's own feature attention mask.
    extractor = transformers.WhisperFeatureExtractor(feature_size=80)
    assert extractor(wave, sampling_rate=16000, return_attention_mask=True)["attention_mask"].sum() == frames
    reference = _reference(model, features, keys=(frames - 1) // 2 + 1)
    assert_close_in_scale(ours[0, :tokens], reference[:tokens])


def test_an_extractor_config_the_encoder_cannot_read_is_refused(qwen2_audio, tmp_path):
    _, folder = qwen2_audio
    (folder / "preprocessor_config.json").write_text('{"feature_size": 128}')
    try:
        with pytest.raises(ValueError, match="feature_size 128 differs from the encoder's 80 mel bins"):
            export_audio(folder, tmp_path / "a")
        (folder / "preprocessor_config.json").write_text('{"feature_size": 80, "hop_length": 320}')
        with pytest.raises(ValueError, match="hop 320 give 1500 frames; the encoder reads 3000"):
            export_audio(folder, tmp_path / "b")
        (folder / "preprocessor_config.json").write_text('{"feature_size": 80, "n_fft": "400"}')
        with pytest.raises(ValueError, match="n_fft must be a positive integer"):
            export_audio(folder, tmp_path / "c")
    finally:
        (folder / "preprocessor_config.json").unlink()


def test_a_checkpoint_without_an_audio_encoder_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "whisper"}')
    with pytest.raises(ValueError, match="'whisper' has no audio export"):
        export_audio(tmp_path, tmp_path / "out")
