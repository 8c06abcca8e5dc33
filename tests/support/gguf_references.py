"""transformers' tokenizer and float32 model of a real GGUF, loaded once per test session.

Loading a GGUF into transformers dequantizes every tensor (seconds for SmolLM2,
tens of seconds for Qwen2.5-0.5B). The reader, tokenizer, export and tool-call
checks all compare against the same references, so each is loaded once and
shared; no test changes them (``eval`` mode, ``no_grad`` calls only).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from support.lazy import torch, transformers


@functools.lru_cache(maxsize=2)
def reference_tokenizer(gguf: Path) -> Any:
    """transformers' tokenizer read from ``gguf``."""
    return transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


@functools.lru_cache(maxsize=2)
def reference_model(gguf: Path) -> Any:
    """transformers' causal LM with ``gguf``'s weights dequantized to float32, in eval mode."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    return model.eval()
