"""Time of the audio stage per clip: log-mel features plus the audio graph.

Two parts, both on random weights that transformers builds here (no audio
checkpoint needs downloading):

* the tiny Qwen2-Audio checkpoint of the tests, its encoder exported with
  ``clika_export.media.audio_export`` and run through onnxruntime on a 10 s clip;
* a paper estimate for Qwen2-Audio-7B: 1- and 2-layer encoders at its real
  dimensions are timed on one chunk, their difference is the cost of a layer,
  and the estimate is ``fixed + 32 * layer`` per clip. The encoder always reads
  a whole 30 s chunk (the padding keys are masked, not cut), so every clip up
  to 30 s costs the same.

Qwen2-Audio-7B's encoder dimensions (its config.json's ``audio_config``, the
Whisper-large-v3 encoder): d_model 1280, 32 layers, 20 heads, FFN 5120, 128 mel
bins, 1500 positions; the projector maps into the 4096-wide Qwen-7B text model.

    python benchmarks/features/audio.py [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from stage_timing import median_ms, ort_session, print_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from audio_helpers import build_qwen2_audio_chat  # noqa: E402  (the tests' tiny checkpoint)
from audio_signals import speech_like  # noqa: E402

from clika_export.media.audio_export import export_audio  # noqa: E402
from clika_runtime.media.audio_features import (  # noqa: E402
    AudioSettings,
    encoder_attention_bias,
    log_mel_features,
    valid_frames,
)

QWEN2_AUDIO_7B = dict(
    d_model=1280, encoder_layers=32, encoder_attention_heads=20, encoder_ffn_dim=5120, num_mel_bins=128
)  # fmt: skip
QWEN2_AUDIO_7B_TEXT_HIDDEN = 4096
POSITIONS = 1500


def _feeds(wave: np.ndarray, settings: AudioSettings) -> dict:
    return {
        "input_features": log_mel_features(wave, settings)[None],
        "attention_bias": encoder_attention_bias(valid_frames(len(wave), settings)),
    }


def tiny_qwen2_audio(work: Path, wave: np.ndarray, rounds: int, threads: int) -> dict:
    build_qwen2_audio_chat(work / "qwen2-audio-hf")
    spec = export_audio(work / "qwen2-audio-hf", work / "qwen2-audio")
    settings = AudioSettings(**spec.details)
    session = ort_session(work / "qwen2-audio" / spec.file, threads)
    feeds = _feeds(wave, settings)
    return {
        "model": "tiny qwen2-audio (d_model 32, 2 layers, 80 mels)",
        "clip_s": len(wave) / settings.sampling_rate,
        "features_ms": median_ms(lambda: _feeds(wave, settings), rounds),
        "graph_ms": median_ms(lambda: session.run(None, feeds), rounds),
    }


def _encoder(work: Path, layers: int) -> Path:
    import torch
    import transformers

    config = transformers.Qwen2AudioConfig(
        audio_config={**QWEN2_AUDIO_7B, "encoder_layers": layers},
        text_config=dict(
            hidden_size=QWEN2_AUDIO_7B_TEXT_HIDDEN, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=32, num_key_value_heads=8, vocab_size=64,
        ),
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2AudioForConditionalGeneration(config).eval()
    folder = work / f"qwen2-audio-7b-{layers}"
    model.save_pretrained(folder)
    return folder / "out" / export_audio(folder, folder / "out").file


def qwen2_audio_7b_estimate(work: Path, wave: np.ndarray, rounds: int, threads: int) -> dict:
    settings = AudioSettings(n_mels=QWEN2_AUDIO_7B["num_mel_bins"])
    feeds = _feeds(wave, settings)
    one, two = (
        median_ms(lambda s=ort_session(_encoder(work, n), threads): s.run(None, feeds), rounds)
        for n in (1, 2)
    )
    layer = two - one
    d, f = QWEN2_AUDIO_7B["d_model"], QWEN2_AUDIO_7B["encoder_ffn_dim"]
    # One layer's multiply-adds on a chunk (q/k/v/out projections, MLP, scores + weighted sum), so
    # the achieved rate lets a reader rescale the estimate to another machine.
    layer_gflop = (2 * POSITIONS * (4 * d * d + 2 * d * f) + 4 * POSITIONS * POSITIONS * d) / 1e9
    clip_ms = one - layer + QWEN2_AUDIO_7B["encoder_layers"] * layer
    return {
        "model": "Qwen2-Audio-7B encoder dimensions (paper estimate)",
        "encoder_1_layer_ms": one,
        "encoder_2_layers_ms": two,
        "layer_ms": layer,
        "layer_gflop": layer_gflop,
        "achieved_gflop_per_s": layer_gflop / (layer / 1e3),
        "clip_ms": clip_ms,
        "features_ms": median_ms(lambda: _feeds(wave, settings), rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    wave = speech_like(10.0, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = [
            tiny_qwen2_audio(work, wave, args.rounds, args.threads),
            qwen2_audio_7b_estimate(work, wave, args.rounds, args.threads),
        ]
    print_rows(f"audio stage, {args.threads} threads, median of {args.rounds} runs (ms); a 10 s clip", rows)


if __name__ == "__main__":
    main()
