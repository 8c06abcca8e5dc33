"""Real models exported fp32 from GGUF, against transformers reading the same GGUF (slow).

transformers dequantizes the GGUF tensors to float32, so both sides hold the
same weights: logits must agree within 1e-3 of their scale on a ragged batch
(prefill, chunked prefill next to decode rows, decode), and greedy
continuations of 48 tokens on 10 chat prompts, decoded as one batch on our
side, must be identical to transformers decoding each prompt alone.
Exports and transformers' answers are cached between runs (``support.reference_answers``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.gguf_references import reference_greedy, reference_model, reference_tokenizer
from support.lazy import torch
from support.reference_answers import ReferenceAnswers

from clika_export.api import cached_export
from clika_export.verify import FP32_TOLERANCE, StepRunner, greedy, relative_error
from clika_runtime.contract.manifest import Manifest

pytestmark = pytest.mark.slow

NEW_TOKENS = 48
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in one sentence what a CPU cache is.",
    "List three prime numbers greater than 20.",
    "Write a Python function that reverses a string.",
    "Why is the sky blue?",
    "Translate 'good morning' into Spanish and German.",
    "Give me a short tip for learning to cook.",
    "What does HTTP stand for?",
    "Summarize the plot of Romeo and Juliet in two sentences.",
]


class Reference:
    """transformers on the same GGUF: answers kept on disk, its model loaded only on a miss."""

    def __init__(self, gguf: Path) -> None:
        self.gguf = gguf
        self.answers = ReferenceAnswers(gguf)

    @functools.cached_property
    def tokenizer(self) -> Any:
        return reference_tokenizer(self.gguf)

    @functools.cached_property
    def model(self) -> Any:
        torch.set_num_threads(1)  # on a shared machine one thread beats two contended ones by far
        return reference_model(self.gguf)

    def prompt_ids(self, text: str) -> list[int]:
        return self.answers.recall("prompt", text, lambda: self._prompt_ids(text)).tolist()

    def logits(self, tokens: list[int], first: int) -> np.ndarray:
        """The logits of positions ``first`` onwards after ``tokens``."""
        return self.answers.recall("logits", [tokens, first], lambda: self._logits(tokens)[first:])

    def greedy(self, tokens: list[int], count: int) -> list[int]:
        return reference_greedy(self.gguf, tokens, count)

    def _prompt_ids(self, text: str) -> list[int]:
        messages = [{"role": "user", "content": text}]
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def _logits(self, tokens: list[int]) -> np.ndarray:
        with torch.no_grad():
            return self.model(torch.tensor([tokens])).logits[0].numpy()


@pytest.fixture(scope="module", params=["smollm2_gguf", "qwen05_gguf"])
def model_pair(request) -> tuple[Manifest, Path, Reference]:
    gguf = request.getfixturevalue(request.param)
    folder = cached_export(gguf, progress=False)
    return Manifest.read(folder), folder, Reference(gguf)


def _runner(manifest: Manifest, folder: Path, slots: int, capacity: int) -> StepRunner:
    return StepRunner.open(folder / manifest.graphs["continuous"].file, manifest, slots, capacity, threads=1)


def _check(ref: Reference, rows: list, logits: list, seqs: list[list[int]]) -> None:
    for b, (past, new, want_all) in enumerate(rows):
        if not new:
            continue
        end = past + len(new)
        expect = ref.logits(seqs[b][:end], past if want_all else end - 1)
        assert logits[b].shape == expect.shape
        assert relative_error(logits[b], expect) < FP32_TOLERANCE, b


def test_logits_match_transformers(model_pair) -> None:
    manifest, folder, ref = model_pair
    seqs = [ref.prompt_ids(p) for p in PROMPTS[:3]]
    runner = _runner(manifest, folder, slots=4, capacity=128)
    half = len(seqs[0]) // 2
    # Row 0: the first half of its prompt, every position; rows 1, 2: whole prompts; row 3 idle.
    first = [(0, seqs[0][:half], True), (0, seqs[1], False), (0, seqs[2], False), (0, [], False)]
    logits = runner.step(first)
    _check(ref, first, logits, seqs)
    # Row 0: the rest of its prompt as a chunk, next to rows 1 and 2 decoding their greedy token.
    second = [(half, seqs[0][half:], False), None, None, (0, [], False)]
    for b in (1, 2):
        token = int(np.argmax(logits[b][-1]))
        second[b] = (len(seqs[b]), [token], False)
        seqs[b].append(token)
    _check(ref, second, runner.step(second), seqs)


def test_greedy_continuations_match_transformers(model_pair) -> None:
    manifest, folder, ref = model_pair
    prompts = [ref.prompt_ids(p) for p in PROMPTS]
    runner = _runner(manifest, folder, slots=len(prompts), capacity=max(map(len, prompts)) + NEW_TOKENS + 1)
    ours = greedy(runner, prompts, NEW_TOKENS)
    eos = set(manifest.tokenizer.eos_token_ids)
    for prompt, got in zip(prompts, ours, strict=True):
        theirs = ref.greedy(prompt, NEW_TOKENS)
        assert got[: len(theirs)] == theirs, ref.tokenizer.decode(prompt)
        if len(theirs) < NEW_TOKENS:  # transformers stopped at an end-of-sequence token
            assert theirs[-1] in eos
