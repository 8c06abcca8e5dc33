"""A Qwen2-VL checkpoint's text model as qwen2 with M-RoPE: its rope section read, bad ones refused."""

from __future__ import annotations

import pytest

from clika_export.checkpoint import CheckpointError
from clika_export.readers.multimodal import text_part


def config(rope: dict) -> dict:
    text = {"model_type": "qwen2_vl_text", "hidden_size": 64, "rope_parameters": rope}
    return {"model_type": "qwen2_vl", "text_config": text, "tie_word_embeddings": False}


def loaders() -> dict:
    names = (
        "model.layers.0.self_attn.q_proj.weight",
        "model.visual.blocks.0.attn.qkv.weight",
        "lm_head.weight",
    )
    return {name: (lambda: None) for name in names}


def test_the_text_model_is_qwen2_with_its_mrope_section():
    rope = {"mrope_section": [16, 24, 24], "rope_theta": 1e6, "rope_type": "default", "type": "mrope"}
    merged, weights = text_part(config(rope), loaders())
    assert merged["model_type"] == "qwen2" and merged["mrope_section"] == [16, 24, 24]
    assert merged["rope_parameters"] == {"rope_theta": 1e6, "rope_type": "default"}
    assert sorted(weights) == ["lm_head.weight", "model.layers.0.self_attn.q_proj.weight"]  # no tower


@pytest.mark.parametrize("section", [None, [16, 24], [16, 24, "24"], [16, -1, 24]])
def test_a_missing_or_malformed_mrope_section_is_refused(section):
    rope = {"rope_theta": 1e6, "type": "mrope", **({"mrope_section": section} if section else {})}
    with pytest.raises(CheckpointError, match="mrope_section"):
        text_part(config(rope), loaders())


def test_a_first_release_config_keeps_the_text_settings_at_its_top_level():
    flat = {
        "model_type": "qwen2_vl", "hidden_size": 64, "vision_config": {"depth": 2},
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}, "rope_theta": 1e6,
    }  # fmt: skip
    merged, weights = text_part(flat, loaders())
    assert merged["model_type"] == "qwen2" and merged["hidden_size"] == 64
    assert merged["mrope_section"] == [2, 3, 3] and merged["rope_scaling"] is None
    assert "vision_config" not in merged and "model.visual.blocks.0.attn.qkv.weight" not in weights
