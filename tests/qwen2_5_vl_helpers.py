"""A tiny random Qwen2.5-VL with a tokenizer and chat template, and transformers' processor for it."""

from __future__ import annotations

import json
from pathlib import Path

from support.lazy import torch, transformers
from vision_helpers import (
    QWEN2_VL_IMAGE_TOKEN,
    QWEN2_VL_PROCESSOR,
    QWEN2_VL_SPECIALS,
    QWEN2_VL_TEMPLATE,
    TEXT,
    images_only,
    qwen2_vl_tokenizer,
    widen,
)

# Qwen2.5-VL checkpoints name the Qwen2-VL image processor's Qwen2.5 alias; both read the same fields.
QWEN2_5_VL_PROCESSOR = {**QWEN2_VL_PROCESSOR, "image_processor_type": "Qwen2_5_VLImageProcessor"}
# 56-pixel windows: 2 x 2 merged patches, so the test images span several windows, some cut short.
QWEN2_5_VL_VISION = dict(
    depth=3, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=4, patch_size=14,
    spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
)  # fmt: skip


def build_qwen2_5_vl_chat(folder: Path):
    """A tiny Qwen2.5-VL (3 vision blocks, the middle one over the whole frame; 2 text layers,
    M-RoPE sections 2/3/3) with a tokenizer and chat template: a folder the whole export reads."""
    tokenizer = qwen2_vl_tokenizer()
    ids = {name: tokenizer.token_to_id(name) for name in QWEN2_VL_SPECIALS}
    text = {
        **TEXT, "hidden_size": 64, "num_hidden_layers": 2, "bos_token_id": ids["<|im_start|>"],
        "eos_token_id": ids["<|im_end|>"], "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
    }  # fmt: skip
    config = transformers.Qwen2_5_VLConfig(
        vision_config=QWEN2_5_VL_VISION,
        text_config=text,
        image_token_id=QWEN2_VL_IMAGE_TOKEN,
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(0)
    model = transformers.Qwen2_5_VLForConditionalGeneration(config).eval()
    widen(model)
    model.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(QWEN2_5_VL_PROCESSOR))
    tokenizer.save(str(folder / "tokenizer.json"))
    tok_config = {"bos_token": None, "eos_token": "<|im_end|>", "chat_template": QWEN2_VL_TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    return model, folder


def qwen2_5_vl_processor(folder: Path):
    """transformers' Qwen2_5_VLProcessor over the folder's tokenizer, with the Pillow Qwen2-VL image
    processor Qwen2.5-VL uses (its default fast one needs torchvision)."""
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"), eos_token="<|im_end|>"
    )
    image_processor = transformers.Qwen2VLImageProcessorPil(**QWEN2_VL_PROCESSOR)
    return images_only(transformers.Qwen2_5_VLProcessor)(image_processor=image_processor, tokenizer=tokenizer)
