"""The text model inside a Qwen2-Audio checkpoint, in both layouts transformers saves."""

from __future__ import annotations

import pytest

from clika_export.checkpoint import CheckpointError
from clika_export.readers.multimodal import is_multimodal, text_part

CONFIG = {"model_type": "qwen2_audio", "text_config": {"model_type": "qwen2", "hidden_size": 64}}
TEXT_NAMES = ("embed_tokens.weight", "layers.0.self_attn.q_proj.weight", "norm.weight")


def loaders(prefix: str, head: str) -> dict:
    names = [prefix + name for name in TEXT_NAMES] + [head, "audio_tower.conv1.weight"]
    return {name: (lambda name=name: name) for name in names}


@pytest.mark.parametrize(
    "prefix,head",
    [
        ("language_model.model.", "language_model.lm_head.weight"),  # the checkpoints on the Hub
        ("model.language_model.", "lm_head.weight"),  # newer transformers' own layout
    ],
)
def test_the_qwen2_text_model_is_read_from_either_layout(prefix, head):
    assert is_multimodal(CONFIG)
    config, renamed = text_part(CONFIG, loaders(prefix, head))
    assert config["model_type"] == "qwen2" and config["hidden_size"] == 64
    assert sorted(renamed) == sorted(["lm_head.weight", *("model." + name for name in TEXT_NAMES)])
    assert renamed["lm_head.weight"]() == head and renamed["model.norm.weight"]() == prefix + "norm.weight"


def test_another_text_family_is_refused_by_name():
    config = {**CONFIG, "text_config": {"model_type": "llama"}}
    with pytest.raises(
        CheckpointError, match="the qwen2_audio text model is 'llama'; only a qwen2 text model"
    ):
        text_part(config, loaders("language_model.model.", "language_model.lm_head.weight"))


def test_a_sparse_text_config_gets_the_defaults_transformers_fills_in():
    transformers = pytest.importorskip("transformers")
    # The text_config of Qwen2-Audio-7B's config.json names little more than these.
    sparse = {"model_type": "qwen2", "intermediate_size": 11008, "max_position_embeddings": 8192}
    sparse |= {"rope_theta": 10000, "rms_norm_eps": 1e-5, "vocab_size": 156032}
    config, _ = text_part(
        {**CONFIG, "text_config": sparse}, loaders("language_model.model.", "lm_head.weight")
    )
    reference = transformers.Qwen2AudioConfig(text_config=sparse).text_config
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        assert config[key] == getattr(reference, key), key
    assert config.get("num_key_value_heads", config["num_attention_heads"]) == reference.num_key_value_heads
    assert (
        config["rms_norm_eps"] == reference.rms_norm_eps == 1e-5 and config["max_position_embeddings"] == 8192
    )
