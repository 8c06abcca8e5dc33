"""Quality of an exported model: perplexity on fixed text, greedy agreement with a reference.

Both run a model folder through the step-graph contract (``pack_step`` inputs,
the KV cache bound in place), one sequence at a time, so any precision of any
exported model is measured the same way.

* ``perplexity``: the text's tokens cut into windows of ``window`` tokens
  (each scored from an empty cache), up to a fixed token budget.
* ``greedy_agreement``: 32 greedy tokens (EOS masked) per chat prompt from two
  models; the share of prompts whose tokens match exactly and the mean length
  of the common prefix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from clika_runtime.chat.templates.chat_template import ChatTemplate
from clika_runtime.contract.model_folder import ModelFolder, open_model_folder
from clika_runtime.contract.step_graph import GridLayout, grid_layout, pack_step, text_only_media

# Fixed prompts for greedy agreement: short, varied, answerable by a small chat model.
CHAT_PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain photosynthesis in one paragraph.",
    "Give me three tips for learning a new language.",
    "What is 17 multiplied by 23?",
    "Describe the water cycle.",
    "Why is the sky blue?",
    "Write a short story opening about a lost key.",
    "What are the benefits of regular exercise?",
    "Summarize the plot of Romeo and Juliet.",
    "How does a refrigerator work?",
    "List the planets of the solar system.",
    "What is the difference between weather and climate?",
    "Write a Python function that reverses a string.",
    "Who wrote the novel 1984?",
    "Give a recipe for a simple tomato soup.",
    "What causes earthquakes?",
    "Translate 'good morning' into Spanish and French.",
    "Why do leaves change color in autumn?",
    "Suggest a name for a friendly robot.",
)


class SequenceRunner:
    """Runs one sequence through a model folder's step graph, the KV cache updated in place."""

    def __init__(self, model: ModelFolder, capacity: int) -> None:
        arch = model.manifest.architecture
        self.model = model
        self.session = model.session
        self.capacity = capacity
        self.context_window = model.manifest.context_window
        # Folders exported before the token_cell form take the flat grid maps.
        self.layout = grid_layout(i.name for i in self.session.get_inputs()) or GridLayout.CELLS
        self.logits_name = model.graph.logits_output
        kv = model.graph.kv
        self.binding = self.session.io_binding()
        self.binding.bind_output(self.logits_name)  # bound first: stays output 0 when rebound
        for name, array in text_only_media(self.session.get_inputs()).items():  # a vision folder's graph
            self.binding.bind_cpu_input(name, array)
        self._values = []
        shape = (1, arch.num_kv_heads, capacity, arch.head_dim)
        for layer in range(arch.num_layers):
            for past, present in ((kv.past_key, kv.present_key), (kv.past_value, kv.present_value)):
                value = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, kv.dtype))
                self._values.append(value)
                self.binding.bind_ortvalue_input(past.format(layer=layer), value)
                self.binding.bind_ortvalue_output(present.format(layer=layer), value)
        self.past = 0

    def reset(self) -> None:
        """Forget the sequence (the cache rows are overwritten before they are read again)."""
        self.past = 0

    def step(self, tokens: Sequence[int], all_logits: bool = False) -> np.ndarray:
        """Run ``tokens`` after the cached ones; logits of every token or of the last one."""
        inputs = pack_step(
            [(self.past, list(tokens), all_logits)],
            capacity=self.capacity,
            context_window=self.context_window,
        )
        for name, array in inputs.feeds(self.layout).items():
            self.binding.bind_cpu_input(name, array)
        self.binding.bind_output(self.logits_name)
        self.session.run_with_iobinding(self.binding)
        self.past += len(tokens)
        return self.binding.get_outputs()[0].numpy()


def open_runner(folder: str | Path, capacity: int = 1024, threads: int | None = None) -> SequenceRunner:
    model = open_model_folder(folder, threads=threads)
    return SequenceRunner(model, min(capacity, model.manifest.context_window))


# -- perplexity -----------------------------------------------------------------------------


def wiki_texts(path: str | Path, articles: int) -> list[str]:
    """The first ``articles`` summaries of the Wikipedia summaries file, in file order."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    texts = [entry["extract"].strip() for entry in data.values() if entry.get("extract", "").strip()]
    if len(texts) < articles:
        raise ValueError(f"{Path(path).name} has {len(texts)} articles, {articles} were asked for")
    return texts[:articles]


@dataclass(frozen=True)
class Perplexity:
    perplexity: float
    tokens_scored: int
    windows: int


def text_tokens(runner: SequenceRunner, texts: Sequence[str], budget: int) -> list[int]:
    """The texts' tokens joined by blank lines, cut to ``budget`` tokens."""
    tokenizer = runner.model.tokenizer
    ids = tokenizer.encode("\n\n".join(texts), add_special_tokens=False).ids
    if len(ids) < budget:
        raise ValueError(f"the texts give {len(ids)} tokens, fewer than the budget of {budget}")
    return ids[:budget]


def perplexity(runner: SequenceRunner, tokens: Sequence[int], window: int = 256) -> Perplexity:
    """Perplexity of ``tokens`` scored in independent windows of ``window`` tokens (BOS first if the model adds one)."""
    bos = (
        runner.model.manifest.tokenizer.bos_token_id
        if runner.model.manifest.tokenizer.add_bos_token
        else None
    )
    nll, count, windows = 0.0, 0, 0
    for start in range(0, len(tokens) - 1, window):
        chunk = list(tokens[start : start + window])
        if len(chunk) < 2:
            break
        prefix = [bos] if bos is not None else []
        runner.reset()
        logits = runner.step(prefix + chunk, all_logits=True).astype(np.float64)
        logits = logits[len(prefix) :]
        log_probs = logits[:-1] - _logsumexp(logits[:-1])
        nll -= float(log_probs[np.arange(len(chunk) - 1), chunk[1:]].sum())
        count += len(chunk) - 1
        windows += 1
    return Perplexity(math.exp(nll / count), count, windows)


def _logsumexp(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=-1, keepdims=True)
    return top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


# -- greedy agreement -----------------------------------------------------------------------


def chat_prompt_ids(runner: SequenceRunner, prompt: str) -> list[int]:
    """The prompt rendered by the model's own chat template (plain text if it has none), as ids."""
    model = runner.model
    tok = model.manifest.tokenizer
    if model.chat_template:
        specials = {k: v for k, v in (("bos_token", tok.bos_token), ("eos_token", tok.eos_token)) if v}
        text = ChatTemplate(model.chat_template, special_tokens=specials).render(
            [{"role": "user", "content": prompt}]
        )
        return model.tokenizer.encode(text, add_special_tokens=False).ids
    return model.tokenizer.encode(prompt, add_special_tokens=True).ids


def greedy_tokens(runner: SequenceRunner, prompt_ids: Sequence[int], new_tokens: int = 32) -> list[int]:
    """Greedy continuation with every EOS id masked (so every prompt yields ``new_tokens`` tokens)."""
    eos = list(runner.model.manifest.tokenizer.eos_token_ids)
    runner.reset()
    logits = runner.step(prompt_ids)[-1]
    out = []
    for _ in range(new_tokens):
        logits = logits.copy()
        logits[eos] = -np.inf
        token = int(np.argmax(logits))
        out.append(token)
        if len(out) < new_tokens:
            logits = runner.step([token])[-1]
    return out


@dataclass(frozen=True)
class Agreement:
    exact: int
    prompts: int
    mean_common_prefix: float
    new_tokens: int

    def as_dict(self) -> dict:
        return {
            "exact_match": f"{self.exact}/{self.prompts}",
            "mean_common_prefix": round(self.mean_common_prefix, 2),
            "new_tokens": self.new_tokens,
        }


def greedy_agreement(
    reference: SequenceRunner,
    candidate: SequenceRunner,
    prompts: Sequence[str] = CHAT_PROMPTS,
    new_tokens: int = 32,
) -> Agreement:
    """How often ``candidate`` decodes exactly what ``reference`` decodes, greedily, from the same prompt."""
    exact, prefixes = 0, []
    for prompt in prompts:
        ids = chat_prompt_ids(reference, prompt)
        ref = greedy_tokens(reference, ids, new_tokens)
        got = greedy_tokens(candidate, ids, new_tokens)
        common = next((i for i, (a, b) in enumerate(zip(ref, got, strict=True)) if a != b), new_tokens)
        exact += common == new_tokens
        prefixes.append(common)
    return Agreement(exact, len(prompts), float(np.mean(prefixes)), new_tokens)


def logits_error(reference: SequenceRunner, candidate: SequenceRunner, tokens: Sequence[int]) -> dict:
    """Relative error of the candidate's logits over a token sequence: RMS over rows, and top-1 agreement."""
    reference.reset()
    ref = reference.step(tokens, all_logits=True).astype(np.float64)
    candidate.reset()
    got = candidate.step(tokens, all_logits=True).astype(np.float64)
    rel = np.linalg.norm(got - ref, axis=-1) / np.maximum(np.linalg.norm(ref, axis=-1), 1e-30)
    return {
        "rel_logits_error": float(np.sqrt((rel**2).mean())),
        "top1_agreement": float((got.argmax(-1) == ref.argmax(-1)).mean()),
    }
