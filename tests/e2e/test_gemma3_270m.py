"""gemma-3-270m from its GGUF (Q4_K_M): the fp32 export decodes what transformers decodes from the same file.

transformers reads the GGUF too (dequantizing its blocks to float32 and taking
Gemma's ``1 + w`` norms back to ``w``), so both run the same weights. The
prompts are short ones and one of more than 600 tokens, so the sliding layers'
window of 512 keys hides part of it; they decode together in one batch, in
both KV modes (the paged one through the runtime's engine, with a second
request that reuses the long prompt's cached blocks).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.gguf_references import reference_greedy

from clika_export.api import cached_export
from clika_export.pull.fetch import fetch_data, fetch_gguf
from clika_export.verify import StepRunner, greedy
from clika_quant.quality import wiki_texts
from clika_runtime import modelverse
from clika_runtime.contract.manifest import Manifest

pytestmark = pytest.mark.slow

CONTEXT = 1024
NEW_TOKENS = 12
TEXTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,"]


@pytest.fixture(scope="module")
def gemma3_gguf() -> Path:
    return fetch_gguf("gemma-3-270m", progress=False)


@pytest.fixture(scope="module")
def folder(gemma3_gguf: Path) -> Path:
    return cached_export(gemma3_gguf, "fp32", context_window=CONTEXT, progress=False)


@pytest.fixture(scope="module")
def texts(folder: Path) -> list[str]:
    """The short prompts and a long one: Wikipedia summaries cut to about 640 tokens."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    articles = "\n\n".join(wiki_texts(fetch_data("wiki-summaries", progress=False), 12))
    ids = tokenizer.encode(articles, add_special_tokens=False).ids
    return [*TEXTS, tokenizer.decode(ids[:640])]


@pytest.fixture(scope="module")
def prompts(folder: Path, texts: list[str]) -> list[list[int]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = [tokenizer.encode(text).ids for text in texts]
    assert all(p[0] == Manifest.read(folder).tokenizer.bos_token_id for p in ids)  # BOS first
    assert len(ids[-1]) > 600  # past the window of 512
    return ids


@pytest.fixture(scope="module")
def expected(gemma3_gguf: Path, prompts: list[list[int]]) -> list[list[int]]:
    """transformers' greedy continuations, never stopping early; kept on disk between runs."""
    return [reference_greedy(gemma3_gguf, ids, NEW_TOKENS, ignore_eos=True) for ids in prompts]


def test_the_export_is_a_gemma3_with_windows(folder: Path) -> None:
    manifest = Manifest.read(folder)
    assert manifest.architecture.family == "gemma3" and manifest.architecture.head_dim == 256
    assert manifest.provenance.source_format == "gguf"
    assert manifest.quality["reference_check"]["max_rel_logits_error"] < 1e-3
    assert manifest.chat_template_file is None  # a base model


def test_fp32_greedy_continuations_equal_transformers(folder, prompts, expected) -> None:
    manifest = Manifest.read(folder)
    runner = StepRunner.open(folder / "model.onnx", manifest, len(prompts), 704, threads=2)
    assert greedy(runner, prompts, NEW_TOKENS) == expected


def test_paged_engine_continuations_and_prefix_reuse(folder, texts, expected) -> None:
    model = modelverse.load(folder, threads=2, kv_cache_mode="paged")
    try:
        settings = dict(max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
        replies = model.generate_batch(texts, **settings)
        assert replies == [model.tokenizer.decode(e) for e in expected]
        again = model.generate(texts[-1], **settings)
        assert model.report.cached_tokens >= 512 and again == replies[-1]
    finally:
        model.close()
