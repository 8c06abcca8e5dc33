"""A tiny random Qwen2-Audio checkpoint built with transformers, with a tokenizer and chat template."""

from __future__ import annotations

import json
from pathlib import Path

from support.lazy import torch, transformers
from vision_helpers import TEXT, marker_tokenizer, widen

AUDIO_TOKEN = 319
N_MELS = 80
QWEN2_AUDIO_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|audio_bos|>", "<|audio_eos|>", "<|endoftext|>")
# Qwen2-Audio-Instruct's template: a clip is "Audio N: <|audio_bos|><|AUDIO|><|audio_eos|>", found by
# its part's ``audio`` (or ``audio_url``) key, whatever the part's type.
QWEN2_AUDIO_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}Audio {{ audio_count.value }}: "
    "<|audio_bos|><|AUDIO|><|audio_eos|>\n{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
EXTRACTOR = {
    "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": N_MELS,
    "sampling_rate": 16000,
    "hop_length": 160,
    "n_fft": 400,
    "chunk_length": 30,
    "padding_value": 0.0,
    "return_attention_mask": True,
}


def qwen2_audio_tokenizer():
    """Byte-level: the 256 byte symbols, the chat and audio specials from 256, ``<|AUDIO|>`` at 319."""
    return marker_tokenizer(QWEN2_AUDIO_SPECIALS, "<|AUDIO|>", AUDIO_TOKEN)


def build_qwen2_audio_chat(folder: Path):
    """A tiny random Qwen2AudioForConditionalGeneration saved with tokenizer, template and extractor."""
    config = transformers.Qwen2AudioConfig(
        audio_config=dict(
            d_model=32, encoder_attention_heads=4, encoder_layers=2, encoder_ffn_dim=64, num_mel_bins=N_MELS
        ),
        # head_dim 16: the step graph's attention op takes head sizes in multiples of 8.
        text_config={**TEXT, "hidden_size": 64, "num_hidden_layers": 2},
        audio_token_index=AUDIO_TOKEN,
    )
    torch.manual_seed(0)
    model = transformers.Qwen2AudioForConditionalGeneration(config).eval()
    widen(model)
    model.save_pretrained(folder)
    qwen2_audio_tokenizer().save(str(folder / "tokenizer.json"))
    tok_config = {
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": QWEN2_AUDIO_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    (folder / "preprocessor_config.json").write_text(json.dumps(EXTRACTOR))
    return model, folder


def processor():
    """transformers' own Qwen2AudioProcessor over the same tokenizer and extractor settings."""
    settings = {k: v for k, v in EXTRACTOR.items() if k not in ("feature_extractor_type",)}
    return transformers.Qwen2AudioProcessor(
        feature_extractor=transformers.WhisperFeatureExtractor(**settings),
        tokenizer=transformers.PreTrainedTokenizerFast(tokenizer_object=qwen2_audio_tokenizer()),
        chat_template=QWEN2_AUDIO_TEMPLATE,
    )
