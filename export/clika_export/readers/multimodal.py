"""The text model inside a multimodal Hugging Face checkpoint, read as the text family it is.

Idefics3 / SmolVLM keep a llama text model under ``model.text_model.*`` (its
settings in ``text_config``) beside the vision tower and connector, which
``clika_export.media.vision_export`` exports on their own; Qwen2-Audio keeps
a qwen2 text model under ``language_model.model.*`` (``model.language_model.*``
as newer transformers save it) beside the audio tower that
``clika_export.media.audio_export`` exports. Qwen2-VL's text
model is qwen2 with M-RoPE (three rotary sections fed from the image grid's
positions) under ``model.*`` (``model.language_model.*`` in newer saves, the
tower under ``visual.*`` / ``model.visual.*``; its settings in ``text_config``,
or at the config's top level in the first releases): its rope's ``mrope_section``
becomes the config's top-level ``mrope_section`` (``clika_export.families.qwen2``
reads it) and the rope itself the default one. Qwen2.5-VL's text model is
read as Qwen2-VL's (its windowed vision tower is the difference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clika_export.checkpoint import CheckpointError

# model_type -> (prefix of the text model's weights, the text family the text config must name)
TEXT_MODELS = {
    "idefics3": ("model.text_model.", "llama"),
    "smolvlm": ("model.text_model.", "llama"),
    "qwen2_vl": ("model.language_model.", "qwen2"),
    "qwen2_5_vl": ("model.language_model.", "qwen2"),
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
# Text configs that name their own model type for the text family's.
_TEXT_TYPES = {"qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2"}
# Checkpoints that keep the text model at the text layout's own names (older Qwen2-VL saves):
# every ``model.*`` weight but the vision tower's is the text model's.
_BARE_TEXT = {"qwen2_vl": ("model.visual.", "visual."), "qwen2_5_vl": ("model.visual.", "visual.")}
# Multimodal families refused by name (model_type -> why); none at present.
_REFUSED: dict[str, str] = {}


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
    if text is None and kind in _BARE_TEXT:  # Qwen2-VL's first releases: the text settings at the top
        text = {k: v for k, v in config.items() if k not in ("vision_config", "text_config", "model_type")}
    if not isinstance(text, dict):
        raise CheckpointError(f"config.json of a {kind} checkpoint has no text_config object")
    text_type = str(text.get("model_type", family)).lower()
    if _TEXT_TYPES.get(text_type, text_type) != family:
        raise CheckpointError(
            f"the {kind} text model is {text.get('model_type')!r}; only a {family} text model is exported"
        )
    given = {key: value for key, value in text.items() if value is not None}
    merged = {**_TEXT_DEFAULTS.get(kind, {}), **given, "model_type": family}
    if "tie_word_embeddings" in config:  # the outer model decides whether lm_head is tied
        merged["tie_word_embeddings"] = config["tie_word_embeddings"]
    if kind in _BARE_TEXT:
        merged = _mrope_config(merged, kind)
    renamed = {}
    for start in (prefix, *_OTHER_PREFIXES.get(kind, ())):
        renamed.update(
            {"model." + name[len(start) :]: load for name, load in loaders.items() if name.startswith(start)}
        )
    if not renamed and kind in _BARE_TEXT:
        tower = _BARE_TEXT[kind]
        renamed = {
            name: load
            for name, load in loaders.items()
            if name.startswith("model.") and not name.startswith(tower)
        }
    for head in _LM_HEADS:
        if head in loaders:
            renamed["lm_head.weight"] = loaders[head]
    if not renamed:
        raise CheckpointError(f"the {kind} checkpoint has no text model weights under {prefix}*")
    return merged, renamed


def _mrope_config(text: dict[str, Any], kind: str) -> dict[str, Any]:
    """``text`` with its rope's ``mrope_section`` moved to the top level and the rope made default.

    transformers 5 writes ``rope_parameters`` (``rope_type`` "default", ``type`` "mrope"); older
    configs ``rope_scaling`` ``{"type": "mrope", "mrope_section": [...]}``.
    """
    merged = dict(text)
    section = None
    for key in ("rope_parameters", "rope_scaling"):
        rope = merged.get(key)
        if rope is None:
            continue
        if not isinstance(rope, dict):
            raise CheckpointError(f"config.json: the {kind} text_config's {key} must be an object")
        if "mrope_section" in rope:
            section = rope["mrope_section"]
        kept = {k: v for k, v in rope.items() if k not in ("mrope_section", "type", "rope_type")}
        merged[key] = {**kept, "rope_type": "default"} if key == "rope_parameters" else None
    if section is None:
        raise CheckpointError(f"config.json: the {kind} text_config names no rope mrope_section")
    if (
        not isinstance(section, list)
        or len(section) != 3
        or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in section)
    ):
        raise CheckpointError(
            f"config.json: mrope_section must list 3 positive integers (temporal, height, width), "
            f"not {section!r}"
        )
    merged["mrope_section"] = list(section)
    return merged
