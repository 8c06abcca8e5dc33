"""The tokenizer rebuilt from each of llama.cpp's test vocabularies encodes every test case as llama.cpp does.

llama.cpp's test tokenizes without adding bos/eos and without parsing special
tokens (control tokens in the text are plain text; user-defined ones still
match whole): ``encode_special_tokens`` and ``add_special_tokens=False`` ask
the same of ``tokenizers``.
"""

from __future__ import annotations

import functools

import pytest
from llama_vocab_vectors import vocab_cases, vocab_file

from clika_export import tokenizer_from_gguf

# Byte-level BPE and SentencePiece lose nothing: every case decodes back to its text.
LOSSLESS = (
    "command-r",
    "deepseek-coder",
    "falcon",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
)


@functools.lru_cache(maxsize=1)
def _tokenizer(name: str):
    tokenizer = tokenizer_from_gguf(vocab_file(name))
    tokenizer.encode_special_tokens = True
    return tokenizer


def _mismatches(name: str) -> list[str]:
    tokenizer = _tokenizer(name)
    wrong = []
    for case in vocab_cases(name):
        got = tokenizer.encode(case.text, add_special_tokens=False).ids
        if got != case.ids:
            wrong.append(f"{case.text[:40]!r}: got {got[:12]}..., expected {case.ids[:12]}...")
    return wrong


@pytest.mark.slow
@pytest.mark.parametrize("name", LOSSLESS)
def test_every_case_encodes_as_llama_cpp_and_decodes_back(name):
    assert _mismatches(name) == []
    tokenizer = _tokenizer(name)
    for case in vocab_cases(name):
        assert tokenizer.decode(case.ids, skip_special_tokens=False) == case.text, case.text[:40]
