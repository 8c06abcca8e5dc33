"""Tiny random multimodal checkpoints built with transformers, shared by the vision tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from support.lazy import torch, transformers

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


def build_idefics3(folder: Path, text: dict | None = None):
    config = transformers.Idefics3Config(
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=64,
            patch_size=8,
        ),
        text_config=text or TEXT,
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


# -- a tiny Idefics3 with a tokenizer and chat template, for the end-to-end tests ------------

IDEFICS3_SPECIALS = (
    "<|im_start|>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 5) for c in range(1, 5)),
)
IDEFICS3_IMAGE_TOKEN = 319
# SmolVLM's template shape: content parts of type text and image, an image as one <image> marker.
IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}:"
    "{% if message['content'] is string %}{{ ' ' + message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ ' ' + part['text'] }}"
    "{% elif part['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def marker_tokenizer(specials: tuple[str, ...], marker: str, marker_id: int):
    """Byte-level: the 256 byte symbols, ``specials`` from 256, unused tokens, ``marker`` at ``marker_id``.

    The media checkpoints' tokenizers: the marker is the token a media item expands into.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {symbol: i for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tokens = [*specials]
    tokens += [f"<unused_{i}>" for i in range(marker_id - 256 - len(tokens))] + [marker]
    vocab.update({token: 256 + i for i, token in enumerate(tokens)})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(tokens)
    assert tokenizer.token_to_id(marker) == marker_id
    return tokenizer


def idefics3_tokenizer():
    """Byte-level: the 256 byte symbols, the Idefics3 specials from 256, ``<image>`` at 319."""
    return marker_tokenizer(IDEFICS3_SPECIALS, "<image>", IDEFICS3_IMAGE_TOKEN)


def build_idefics3_chat(folder: Path):
    """``build_idefics3`` plus a tokenizer and chat template: a folder the whole export reads."""
    # head_dim 16: the step graph's attention op takes head sizes in multiples of 8.
    model, folder = build_idefics3(folder, {**TEXT, "hidden_size": 64, "num_hidden_layers": 2})
    idefics3_tokenizer().save(str(folder / "tokenizer.json"))
    config = {
        "bos_token": "<|im_start|>",
        "eos_token": "<end_of_utterance>",
        "chat_template": IDEFICS3_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return model, folder


# -- a tiny Qwen2-VL with a tokenizer and chat template, for the end-to-end tests ------------

QWEN2_VL_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|video_pad|>")
QWEN2_VL_IMAGE_TOKEN = 319
# Qwen2-VL's template shape (no default system turn): an image part as one pad marker in its frame.
QWEN2_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def qwen2_vl_tokenizer():
    """Byte-level: the 256 byte symbols, Qwen2-VL's specials from 256, ``<|image_pad|>`` at 319."""
    return marker_tokenizer(QWEN2_VL_SPECIALS, "<|image_pad|>", QWEN2_VL_IMAGE_TOKEN)


def build_qwen2_vl_chat(folder: Path):
    """A tiny Qwen2-VL (2 text layers, head_dim 16, M-RoPE sections 2/3/3) with a tokenizer and
    chat template: a folder the whole export reads."""
    tokenizer = qwen2_vl_tokenizer()
    ids = {name: tokenizer.token_to_id(name) for name in QWEN2_VL_SPECIALS}
    text = {
        **TEXT, "hidden_size": 64, "num_hidden_layers": 2, "bos_token_id": ids["<|im_start|>"],
        "eos_token_id": ids["<|im_end|>"], "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
    }  # fmt: skip
    config = transformers.Qwen2VLConfig(
        vision_config=dict(
            depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2, patch_size=14, spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        text_config=text,
        image_token_id=QWEN2_VL_IMAGE_TOKEN,
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2VLForConditionalGeneration(config).eval()
    _save(model, folder, QWEN2_VL_PROCESSOR)
    tokenizer.save(str(folder / "tokenizer.json"))
    tok_config = {"bos_token": None, "eos_token": "<|im_end|>", "chat_template": QWEN2_VL_TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    return model, folder


def qwen2_vl_processor(folder: Path):
    """transformers' Qwen2VLProcessor over the folder's tokenizer and image processor."""
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"), eos_token="<|im_end|>"
    )
    image_processor = transformers.Qwen2VLImageProcessorPil(**QWEN2_VL_PROCESSOR)
    return images_only(transformers.Qwen2VLProcessor)(image_processor=image_processor, tokenizer=tokenizer)


def images_only(processor_class: type) -> type:
    """``processor_class`` without a video processor (whose class needs torchvision): images only.

    Made when asked for, so that importing this module does not import transformers."""

    class ImagesOnly(processor_class):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name != "video_processor":
                return super().check_argument_for_proper_class(argument_name, argument)

    return ImagesOnly


def png_data_url(image: np.ndarray) -> str:
    """``image`` as a PNG ``data:`` URL (lossless: the server decodes the same pixels)."""
    import base64
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
