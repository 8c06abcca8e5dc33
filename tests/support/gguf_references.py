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
from support.reference_answers import ReferenceAnswers


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


def reference_greedy(gguf: Path, tokens: list[int], count: int, *, ignore_eos: bool = False) -> list[int]:
    """transformers' greedy continuation of ``tokens`` by ``count`` tokens, kept on disk.

    The model is loaded only when the answer is not kept yet (``support.reference_answers``).
    """
    answer = ReferenceAnswers(gguf).recall(
        "greedy",
        [tokens, count, ignore_eos],
        lambda: _greedy(reference_model(gguf), tokens, count, ignore_eos),
    )
    return answer.tolist()


def _greedy(model: Any, tokens: list[int], count: int, ignore_eos: bool) -> list[int]:
    torch.set_num_threads(1)  # on a shared machine one thread beats two contended ones by far
    ids = torch.tensor([tokens])
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=count, do_sample=False,
            min_new_tokens=count if ignore_eos else None,
        )  # fmt: skip
    return out[0, len(tokens) :].tolist()
