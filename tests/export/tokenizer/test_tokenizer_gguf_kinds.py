"""SentencePiece and WordPiece GGUF tokenizers on tiny vocabularies written by the test: the rules and bad input."""

from __future__ import annotations

import math

import pytest
from gguf import GGUFValueType, GGUFWriter
from tokenizers import Tokenizer, pre_tokenizers

from clika_export import tokenizer_from_gguf
from clika_export.checkpoint import CheckpointError
from clika_export.tokenizer_gguf import read_gguf_tokenizer
from clika_export.tokenizer_gguf.pre_split import PRE_SPLITS, split_pre_tokenizer

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6
_BYTES = [f"<0x{b:02X}>" for b in range(256)]


def _spm_vocab() -> tuple[list[str], list[int], list[float]]:
    """<unk> <s> </s>, the bytes, then pieces whose scores decide which pair merges first."""
    pieces = {"▁": -1.0, "a": -2.0, "b": -3.0, "c": -4.0, "ab": -5.0, "bc": -0.5, "▁a": -6.0, "<tool>": 0.0}
    tokens = ["<unk>", "<s>", "</s>", *_BYTES, *pieces]
    types = [UNKNOWN, CONTROL, CONTROL, *[BYTE] * 256, *[NORMAL] * (len(pieces) - 1), USER_DEFINED]
    scores = [0.0, 0.0, 0.0, *[0.0] * 256, *pieces.values()]
    return tokens, types, scores


def _write(path, kv: dict) -> str:
    writer = GGUFWriter(path, "llama")
    for key, (value, vtype, sub_type) in kv.items():
        writer.add_key_value(key, value, vtype, sub_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def _spm_file(tmp_path, **overrides) -> str:
    tokens, types, scores = _spm_vocab()
    kv = {
        "tokenizer.ggml.model": ("llama", GGUFValueType.STRING, None),
        "tokenizer.ggml.tokens": (tokens, GGUFValueType.ARRAY, GGUFValueType.STRING),
        "tokenizer.ggml.token_type": (types, GGUFValueType.ARRAY, GGUFValueType.INT32),
        "tokenizer.ggml.scores": (scores, GGUFValueType.ARRAY, GGUFValueType.FLOAT32),
        "tokenizer.ggml.bos_token_id": (1, GGUFValueType.UINT32, None),
        "tokenizer.ggml.eos_token_id": (2, GGUFValueType.UINT32, None),
        "tokenizer.ggml.unknown_token_id": (0, GGUFValueType.UINT32, None),
    }
    for key, value in overrides.items():
        key = "tokenizer.ggml." + key
        if value is None:
            kv.pop(key)
        else:
            kv[key] = value
    return _write(tmp_path / "spm.gguf", kv)


def _pieces(tokenizer: Tokenizer, text: str) -> list[str]:
    return tokenizer.encode(text, add_special_tokens=False).tokens


def test_sentencepiece_merges_the_best_scored_pair_first(tmp_path):
    tokenizer = tokenizer_from_gguf(_spm_file(tmp_path))
    assert isinstance(tokenizer, Tokenizer)
    # "bc" outscores "ab", so "▁abc" is ▁a|bc, never ▁|ab|c; "ab" outscores "▁a", so "▁ab" is ▁|ab
    assert _pieces(tokenizer, "abc") == ["▁a", "bc"]
    assert _pieces(tokenizer, "ab") == ["▁", "ab"]
    assert tokenizer.decode(tokenizer.encode("abc a").ids) == "abc a"


def test_sentencepiece_space_prefix_bytes_and_specials(tmp_path):
    tokenizer = tokenizer_from_gguf(_spm_file(tmp_path))
    # a character without a piece becomes its UTF-8 bytes, and decodes back
    assert _pieces(tokenizer, "é") == ["▁", "<0xC3>", "<0xA9>"]
    assert tokenizer.decode(tokenizer.encode("é").ids, skip_special_tokens=True) == "é"
    # text after a token matched whole gets its own leading space mark, as in llama.cpp
    assert _pieces(tokenizer, "a<tool>a") == ["▁a", "<tool>", "▁a"]
    # bos leads by default for SentencePiece; control tokens are specials
    rebuilt = read_gguf_tokenizer(_spm_file(tmp_path))
    assert rebuilt.add_bos_token and tokenizer.encode("a").tokens == ["<s>", "▁a"]
    assert tokenizer.decode(tokenizer.encode("a").ids, skip_special_tokens=True) == "a"


def test_sentencepiece_without_space_prefix(tmp_path):
    path = _spm_file(tmp_path, add_space_prefix=(False, GGUFValueType.BOOL, None))
    tokenizer = tokenizer_from_gguf(path)
    assert _pieces(tokenizer, "a b") == ["a", "▁", "b"]
    assert tokenizer.decode(tokenizer.encode("a b", add_special_tokens=False).ids) == "a b"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"scores": None}, "needs tokenizer.ggml.scores"),
        (
            {"scores": ([0.5], GGUFValueType.ARRAY, GGUFValueType.FLOAT32)},
            "scores has 1 entries for 267 tokens",
        ),
        (
            {"scores": ([*_spm_vocab()[2][:-1], math.nan], GGUFValueType.ARRAY, GGUFValueType.FLOAT32)},
            r"scores\[266\] is nan, not a finite number",
        ),
        (
            {"tokens": ([*_spm_vocab()[0][:-1], "ab"], GGUFValueType.ARRAY, GGUFValueType.STRING)},
            "holds 'ab' twice",
        ),
        (
            {
                "tokens": (
                    [*_spm_vocab()[0][:-2], "x" * 5000, "<tool>"],
                    GGUFValueType.ARRAY,
                    GGUFValueType.STRING,
                )
            },
            "token 265 is 5000 characters long",
        ),
        (
            {"model": ("t5", GGUFValueType.STRING, None)},
            r"kind 't5'.*supported: 'bert' \(WordPiece\), 'gemma4' .*'gpt2' .*'llama' \(SentencePiece\)",
        ),
    ],
)
def test_bad_sentencepiece_metadata_is_named(tmp_path, overrides, message):
    with pytest.raises(CheckpointError, match=message):
        read_gguf_tokenizer(_spm_file(tmp_path, **overrides))


def _bert_file(tmp_path) -> str:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "▁hello", "▁world", "▁wor", "ld", "▁,", "▁!"]
    types = [CONTROL] * 4 + [NORMAL] * 6
    kv = {
        "tokenizer.ggml.model": ("bert", GGUFValueType.STRING, None),
        "tokenizer.ggml.pre": ("bert-bge", GGUFValueType.STRING, None),
        "tokenizer.ggml.tokens": (tokens, GGUFValueType.ARRAY, GGUFValueType.STRING),
        "tokenizer.ggml.token_type": (types, GGUFValueType.ARRAY, GGUFValueType.INT32),
        "tokenizer.ggml.unknown_token_id": (1, GGUFValueType.UINT32, None),
        "tokenizer.ggml.cls_token_id": (2, GGUFValueType.UINT32, None),
        "tokenizer.ggml.seperator_token_id": (3, GGUFValueType.UINT32, None),
        "tokenizer.ggml.padding_token_id": (0, GGUFValueType.UINT32, None),
    }
    return _write(tmp_path / "bert.gguf", kv)


def test_wordpiece_longest_match_unknown_words_and_cls_sep(tmp_path):
    tokenizer = tokenizer_from_gguf(_bert_file(tmp_path))
    encoded = tokenizer.encode("Hello, WORLD! Worldly")
    assert encoded.tokens == ["[CLS]", "▁hello", "▁,", "▁world", "▁!", "[UNK]", "[SEP]"]
    assert tokenizer.decode(encoded.ids) == " hello, world!"
    assert _pieces(tokenizer, "world") == ["▁world"]  # the longest piece, not ▁wor + ld
    assert _pieces(tokenizer, "wor ld") == ["▁wor", "[UNK]"]  # "ld" only continues a word


@pytest.mark.parametrize("name", sorted(PRE_SPLITS))
def test_every_covered_pre_tokenizer_splits_without_losing_text(name):
    text = "Hello  WORLD's 12345 3.14 你好 こんにちは e\u0301 !!\n\n\tx ½ 🦙 <tag>"
    split = pre_tokenizers.Sequence(split_pre_tokenizer(PRE_SPLITS[name].regexes))
    pieces = [piece for piece, _ in split.pre_tokenize_str(text)]
    assert "".join(pieces) == text and len(pieces) > 1
