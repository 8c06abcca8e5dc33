"""Tiny random multimodal checkpoints built with transformers, shared by the vision tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

IDEFICS3_PROCESSOR = {
    "image_processor_type": "Idefics3ImageProcessor",
    "do_image_splitting": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "max_image_size": {"longest_edge": 64},
    "resample": 1,
    "rescale_factor": 1 / 255,
    "size": {"longest_edge": 128},
}
QWEN2_VL_PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "min_pixels": 56 * 56,
    "max_pixels": 28 * 28 * 24,
    "merge_size": 2,
    "patch_size": 14,
    "temporal_patch_size": 2,
}
TEXT = dict(
    hidden_size=48, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=320,
)  # fmt: skip


def widen(model) -> None:
    """Weights wide enough (std 0.1, norms around 1) that every layer changes the embeddings."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or "ln_" in name:
                param.copy_(1 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0, 0.1)


def _save(model, folder: Path, processor: dict) -> Path:
    widen(model)
    model.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(processor))
    return folder


def build_idefics3(folder: Path):
    config = transformers.Idefics3Config(
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=64,
            patch_size=8,
        ),
        text_config=TEXT,
        scale_factor=2,
        image_token_id=319,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Idefics3ForConditionalGeneration(config).eval()
    return model, _save(model, folder, IDEFICS3_PROCESSOR)


def build_qwen2_vl(folder: Path):
    config = transformers.Qwen2VLConfig(
        vision_config=dict(
            depth=2, embed_dim=32, hidden_size=48, num_heads=4, mlp_ratio=2, patch_size=14, spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        text_config={**TEXT, "rope_scaling": {"type": "mrope", "mrope_section": [2, 2, 2]}},
        image_token_id=319,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2VLForConditionalGeneration(config).eval()
    return model, _save(model, folder, QWEN2_VL_PROCESSOR)


def random_image(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


def assert_close_in_scale(ours: np.ndarray, ref: np.ndarray, tolerance: float = 1e-3) -> None:
    """Every value within ``tolerance`` of the reference's largest magnitude."""
    assert ours.shape == ref.shape
    scale = float(np.abs(ref).max())
    assert scale > 0.1  # the embeddings are not degenerate
    assert float(np.abs(ours - ref).max()) <= tolerance * scale
