"""The text model inside a multimodal Hugging Face checkpoint, read as the text family it is.

Idefics3 / SmolVLM keep a llama text model under ``model.text_model.*`` (its
settings in ``text_config``) beside the vision tower and connector, which
``clika_export.media.vision_export`` exports on their own; Qwen2-Audio keeps
a qwen2 text model under ``language_model.model.*`` (``model.language_model.*``
as newer transformers save it) beside the audio tower that
``clika_export.media.audio_export`` exports. Qwen2-VL's text
model is qwen2 with M-RoPE (three rotary sections fed from the image grid's
positions), which the step graph does not build: it is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clika_export.checkpoint import CheckpointError

# model_type -> (prefix of the text model's weights, the text family the text config must name)
TEXT_MODELS = {
    "idefics3": ("model.text_model.", "llama"),
    "smolvlm": ("model.text_model.", "llama"),
    "qwen2_audio": ("language_model.model.", "qwen2"),
}
# Other places a family's text weights are found (the layout newer transformers save).
_OTHER_PREFIXES = {"qwen2_audio": ("model.language_model.",)}
_LM_HEADS = ("lm_head.weight", "language_model.lm_head.weight")
# What transformers' text config class fills in where a checkpoint's text_config is silent
# (Qwen2-Audio-7B's lists little more than its vocabulary and MLP width): Qwen2Config's defaults.
_TEXT_DEFAULTS = {
    "qwen2_audio": {
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
    }
}
_REFUSED = {
    "qwen2_vl": "its text model rotates by M-RoPE (3 sections from the image grid), "
    "which the step graph does not build yet",
    "qwen2_5_vl": "its text model rotates by M-RoPE (3 sections from the image grid), "
    "which the step graph does not build yet",
}


def is_multimodal(config: dict[str, Any]) -> bool:
    """True for a checkpoint whose text model this reader takes out (Idefics3 / SmolVLM, Qwen2-Audio)."""
    return str(config.get("model_type", "")).lower() in TEXT_MODELS


def refuse_unbuilt(config: dict[str, Any]) -> None:
    """A CheckpointError naming a multimodal family whose text model the step graph does not build."""
    kind = str(config.get("model_type", "")).lower()
    if kind in _REFUSED:
        raise CheckpointError(f"{kind} checkpoints are not exported: {_REFUSED[kind]}")


def text_part(
    config: dict[str, Any], loaders: dict[str, Callable[[], Any]]
) -> tuple[dict[str, Any], dict[str, Callable[[], Any]]]:
    """The text model's config and weights (renamed as a text checkpoint's); others unchanged."""
    refuse_unbuilt(config)
    kind = str(config.get("model_type", "")).lower()
    if kind not in TEXT_MODELS:
        return config, loaders
    prefix, family = TEXT_MODELS[kind]
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise CheckpointError(f"config.json of a {kind} checkpoint has no text_config object")
    if str(text.get("model_type", family)).lower() != family:
        raise CheckpointError(
            f"the {kind} text model is {text.get('model_type')!r}; only a {family} text model is exported"
        )
    given = {key: value for key, value in text.items() if value is not None}
    merged = {**_TEXT_DEFAULTS.get(kind, {}), **given, "model_type": family}
    if "tie_word_embeddings" in config:  # the outer model decides whether lm_head is tied
        merged["tie_word_embeddings"] = config["tie_word_embeddings"]
    renamed = {}
    for start in (prefix, *_OTHER_PREFIXES.get(kind, ())):
        renamed.update(
            {"model." + name[len(start) :]: load for name, load in loaders.items() if name.startswith(start)}
        )
    for head in _LM_HEADS:
        if head in loaders:
            renamed["lm_head.weight"] = loaders[head]
    if not renamed:
        raise CheckpointError(f"the {kind} checkpoint has no text model weights under {prefix}*")
    return merged, renamed
