"""The tokenizer rebuilt from each of llama.cpp's test vocabularies encodes every test case as llama.cpp does.

llama.cpp's test tokenizes without adding bos/eos and without parsing special
tokens (control tokens in the text are plain text; user-defined ones still
match whole): ``encode_special_tokens`` and ``add_special_tokens=False`` ask
the same of ``tokenizers``.
"""

from __future__ import annotations

import functools

import pytest
from llama_vocab_vectors import VOCABULARIES, vocab_cases, vocab_file

from clika_export import tokenizer_from_gguf

# Byte-level BPE, SentencePiece and Gemma 4's BPE lose nothing: every case decodes back to its text.
LOSSLESS = tuple(name for name in VOCABULARIES if name != "bert-bge")


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
@pytest.mark.parametrize("name", VOCABULARIES)
def test_every_case_encodes_as_llama_cpp(name):
    assert _mismatches(name) == []
    if name in LOSSLESS:
        tokenizer = _tokenizer(name)
        for case in vocab_cases(name):
            assert tokenizer.decode(case.ids, skip_special_tokens=False) == case.text, case.text[:40]


def _bert_normal(text: str) -> bool:
    """Text llama.cpp's WordPiece decode gives back: lowercase ASCII words, each after one space."""
    words = text.split()
    return text == "".join(f" {word}" for word in words) and all(
        w.isalnum() and w == w.lower() for w in words
    )


@pytest.mark.slow
def test_wordpiece_decodes_like_llama_cpp():
    """llama.cpp's WordPiece decode lowercases, drops accents, writes a space before every word
    and none before punctuation: text already in that form comes back, other text in that form."""
    tokenizer, cases = _tokenizer("bert-bge"), vocab_cases("bert-bge")
    normal = [case for case in cases if _bert_normal(case.text)]
    assert len(normal) >= 2
    for case in normal:
        assert tokenizer.decode(case.ids) == case.text
    decoded = {case.text: tokenizer.decode(case.ids) for case in cases}
    assert decoded["Hello, world!"] == " hello, world!"
    assert decoded["Cửa Việt"] == " cua viet"
    assert decoded["' era"] == "'era"  # a lone apostrophe loses its spaces
