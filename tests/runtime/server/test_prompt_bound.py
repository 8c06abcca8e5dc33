"""The length bound before tokenizing, for tokenizers that normalize their text first.

A sentencepiece-style tokenizer (gemma's) replaces every space by U+2581
before its model runs: the text only grows, so a prompt's bytes still bound
its tokens from below and a multi-megabyte prompt is refused without
tokenizing it. Normalizers that can shorten the text keep the bound off. Real
``tokenizers`` objects, built here.
"""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, normalizers

from clika_runtime.server.errors import ApiError
from clika_runtime.server.prompt_bound import PromptBound
from clika_runtime.text.tokenizer import Tokenizer

WINDOW = 64
LETTERS = "abcdefghij"


def sentencepiece_like(normalizer: normalizers.Normalizer) -> Tokenizer:
    """A BPE over letters and U+2581 with a few merged words, behind ``normalizer``."""
    vocab = {"<unk>": 0, "\u2581": 1, **{c: 2 + i for i, c in enumerate(LETTERS)}}
    merges = [("\u2581", "a"), ("\u2581a", "b"), ("c", "d"), ("\u2581ab", "cd")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    inner = HFTokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    inner.normalizer = normalizer
    return Tokenizer(inner)


SPACES = normalizers.Sequence([normalizers.Replace(" ", "\u2581")])


def test_a_space_to_u2581_normalizer_keeps_the_length_bound():
    bound = PromptBound(sentencepiece_like(SPACES), WINDOW)
    assert bound.longest_token_bytes == len("\u2581abcd".encode())
    with pytest.raises(ApiError) as refused:
        bound.check("abcd " * 1_000_000, "messages")  # 5 MB: refused by its bytes alone
    assert refused.value.status == 400 and refused.value.code == "context_length_exceeded"
    assert bound.encode("ab cd", "messages")  # a short prompt is tokenized as before


def test_the_bound_never_exceeds_the_tokens_a_normalized_prompt_has():
    tokenizer = sentencepiece_like(normalizers.Sequence([normalizers.Prepend("\u2581"), SPACES]))
    bound = PromptBound(tokenizer, WINDOW)
    longest = bound.longest_token_bytes
    assert longest is not None
    rng = random.Random(0)
    for _ in range(300):
        text = "".join(rng.choice(LETTERS + "  x\u00e9") for _ in range(rng.randint(1, 200)))
        assert len(tokenizer.encode(text)) >= -(-len(text.encode()) // longest), text


@pytest.mark.parametrize(
    "normalizer",
    [
        normalizers.NFKC(),
        normalizers.Lowercase(),
        normalizers.Replace("  ", " "),  # shortens the text
        normalizers.Sequence([SPACES, normalizers.Strip()]),
    ],
    ids=["nfkc", "lowercase", "shorter replacement", "strip in a sequence"],
)
def test_a_normalizer_that_may_shorten_the_text_turns_the_bound_off(normalizer):
    bound = PromptBound(sentencepiece_like(normalizer), WINDOW)
    assert bound.longest_token_bytes is None
    bound.check("abcd " * 100_000, "messages")  # no refusal by length: the tokenizer decides
