"""tokenizer.json rebuilt from GGUF metadata: tiny files for the rules, real models against transformers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from gguf import GGUFValueType
from support.gguf_references import reference_tokenizer
from support.reference_answers import ReferenceAnswers

from clika_export.checkpoint import CheckpointError
from clika_export.pull.fetch import fetch_data, fetch_gguf
from clika_export.readers.gguf import read_gguf
from clika_export.tokenizer_gguf import read_gguf_tokenizer

# -- tiny files: the rules ------------------------------------------------------------


def test_merges_apply_and_specials_stay_whole(tiny_gguf):
    tiny = tiny_gguf(family="qwen2")
    tokenizer = read_gguf_tokenizer(tiny.path).tokenizer()
    ids = tokenizer.encode(" the<|im_start|>in<tool_call>").ids
    assert [tiny.tokens[i] for i in ids] == ["Ġthe", "<|im_start|>", "in", "<tool_call>"]
    # control tokens are special (dropped when asked), user-defined ones are not
    assert tokenizer.decode(ids, skip_special_tokens=True) == " thein<tool_call>"
    assert tokenizer.decode(ids, skip_special_tokens=False) == " the<|im_start|>in<tool_call>"


def test_tokenizer_json_is_plain_tokenizers_json(tiny_gguf):
    from tokenizers import Tokenizer

    rebuilt = read_gguf_tokenizer(tiny_gguf().path)
    data = json.loads(rebuilt.tokenizer_json)
    assert data["model"]["type"] == "BPE" and len(data["model"]["vocab"]) == rebuilt.vocab_size
    added = {t["content"]: t["special"] for t in data["added_tokens"]}
    assert added == {"<|endoftext|>": True, "<|im_start|>": True, "<|im_end|>": True, "<tool_call>": False}
    assert Tokenizer.from_str(rebuilt.tokenizer_json).encode("hello").ids  # loads without transformers


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_digits_are_split_one_by_one(tiny_gguf, family):
    tiny = tiny_gguf(family=family)
    tokenizer = read_gguf_tokenizer(tiny.path).tokenizer()
    pieces = [piece for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str("in 2024")]
    assert pieces[-4:] == ["2", "0", "2", "4"]


def test_special_ids_template_and_end_of_generation(tiny_gguf):
    tiny = tiny_gguf()
    rebuilt = read_gguf_tokenizer(tiny.path)
    assert rebuilt.bos_token == "<|im_start|>" and rebuilt.bos_token_id == tiny.tokens.index("<|im_start|>")
    assert rebuilt.eos_token == "<|im_end|>"
    # eos first, then the other control tokens llama.cpp ends generation on
    assert rebuilt.eos_token_ids == (tiny.tokens.index("<|im_end|>"), tiny.tokens.index("<|endoftext|>"))
    assert rebuilt.pad_token_id == tiny.tokens.index("<|endoftext|>")
    assert rebuilt.chat_template == "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert rebuilt.add_bos_token is False


def test_add_bos_token_prepends_bos(tiny_gguf):
    tiny = tiny_gguf(metadata={"tokenizer.ggml.add_bos_token": (True, GGUFValueType.BOOL)})
    rebuilt = read_gguf_tokenizer(tiny.path)
    ids = rebuilt.tokenizer().encode("in").ids
    assert rebuilt.add_bos_token and ids[0] == rebuilt.bos_token_id and len(ids) == 2


def test_checkpoint_carries_the_tokenizer(tiny_gguf):
    tiny = tiny_gguf()
    ckpt = read_gguf(tiny.path)
    rebuilt = read_gguf_tokenizer(tiny.path)
    assert ckpt.tokenizer_json == rebuilt.tokenizer_json
    assert (ckpt.bos_token_id, ckpt.eos_token_ids, ckpt.pad_token_id) == (
        rebuilt.bos_token_id,
        rebuilt.eos_token_ids,
        rebuilt.pad_token_id,
    )
    assert (ckpt.bos_token, ckpt.eos_token, ckpt.chat_template) == (
        "<|im_start|>",
        "<|im_end|>",
        rebuilt.chat_template,
    )


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (
            {"tokenizer.ggml.model": ("t5", GGUFValueType.STRING)},
            "tokenizer kind 't5'.*supported: .*'gpt2' .*'llama' \\(SentencePiece\\)",
        ),
        (
            {"tokenizer.ggml.pre": ("kimi-k2", GGUFValueType.STRING)},
            "pre-tokenizer 'kimi-k2'.*supported: .*deepseek-llm.*qwen2",
        ),
        (
            {"tokenizer.ggml.merges": (["Ġ t", "a b c"], GGUFValueType.ARRAY)},
            "merge #1 'a b c' is not two tokens",
        ),
        ({"tokenizer.ggml.merges": (["Ġ t", "q z"], GGUFValueType.ARRAY)}, "do not form a BPE model"),
        (
            {"tokenizer.ggml.token_type": ([1, 1, 3], GGUFValueType.ARRAY)},
            "token_type has 3 entries for 265 tokens",
        ),
        ({"tokenizer.ggml.bos_token_id": (70000, GGUFValueType.UINT32)}, "bos_token_id' is 70000, outside"),
        ({"tokenizer.ggml.tokens": None}, "lacks the required key 'tokenizer.ggml.tokens'"),
    ],
)
def test_bad_tokenizer_metadata_is_named(tiny_gguf, metadata, message):
    path = tiny_gguf(metadata=metadata).path
    with pytest.raises(CheckpointError, match=message):
        read_gguf_tokenizer(path)


# -- the real models against transformers' GGUF tokenizer ---------------------------------

CORPUS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "日本語のテキストを書きます。中文也可以。한국어도 됩니다.",
    "Emoji: 🤖🚀👍🏽 👨‍👩‍👧‍👦 ❤️ and flags 🇫🇷🇯🇵",
    "café naïve coöperate résumé Ångström straße ﬁ ligature",
    "Ελληνικά, русский текст, עברית, العربية, हिन्दी",
    "tabs\tand\t\tmore\t\t\ttabs",
    "lines\nand\n\nblank\n\n\nlines\r\nwindows\rclassic",
    "trailing spaces   \nand leading\n   indentation",
    "        eight spaces then code",
    "\u00a0non-breaking\u2009thin\u3000ideographic space",
    "numbers 3.14159, 2,718, 1e-9, 0x1F, 007, 123456789",
    "I'm sure they're right, we've seen it, you'll see, he'd know. DON'T SHOUT",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>after end of text",
    "a<|im_end|>b<|im_start|>c",
    '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<not_a_special_token> <|not special either|>",
    "URL: https://example.com/path?q=1&r=two#frag — email: someone@example.org",
    "math: ∑_{i=1}^{n} x_i² ≤ √(n·∑x_i²) ∀ε>0 ∃δ",
    "",
    " ",
    "\n",
    "!!!???...,,,;;;:::",
    "mixedCASEIdentifiers snake_case_names kebab-case-names SCREAMING_CASE",
]

# SmolLM2's own tokenizer (and llama.cpp's "smollm" split) cuts every digit off before
# GPT-2's regex runs; transformers' GGUF loader applies GPT-2's regex alone. The two
# disagree only where a whitespace run of two or more meets a digit.
_SMOLLM_DIGIT_SPLIT_DIFFERS = re.compile(r"\s{2,}\d")


def _reference(gguf_path: Path):
    """transformers' tokenizer for a GGUF (loaded once per session: it takes seconds)."""
    pytest.importorskip("transformers")
    return reference_tokenizer(gguf_path)


def _reference_encodings(gguf_path: Path, texts: list[str]) -> list[dict]:
    """transformers' ids of each text and their decodings, with and without specials; kept on disk."""

    def encode() -> list[dict]:
        reference = _reference(gguf_path)
        return [_encoding(reference, reference(text)["input_ids"]) for text in texts]

    return ReferenceAnswers(gguf_path).recall_json("encodings", texts, encode)


def _encoding(reference, ids: list[int]) -> dict:
    decoded = [reference.decode(ids, skip_special_tokens=skip) for skip in (False, True)]
    return {"ids": ids, "decoded": decoded}


def _reference_specials(gguf_path: Path) -> dict:
    """transformers' template and special tokens of a GGUF; kept on disk."""

    def read() -> dict:
        reference = _reference(gguf_path)
        names = ("chat_template", "bos_token", "eos_token", "bos_token_id", "eos_token_id")
        ids = {token: reference.convert_tokens_to_ids(token) for token in ("<|im_end|>", "<|endoftext|>")}
        return {name: getattr(reference, name) for name in names} | {"ids": ids}

    return ReferenceAnswers(gguf_path).recall_json("specials", [], read)


def _wiki_texts(count: int) -> list[str]:
    summaries = json.loads(fetch_data("wiki-summaries", progress=False).read_text(encoding="utf-8"))
    return [entry["extract"] for entry in list(summaries.values())[:count]]


def _compare(gguf_path: Path, texts: list[str], skip=None) -> int:
    ours = read_gguf_tokenizer(gguf_path).tokenizer()
    compared = 0
    for text, expected in zip(texts, _reference_encodings(gguf_path, texts), strict=True):
        got = ours.encode(text).ids
        if skip is None or not skip.search(text):
            assert got == expected["ids"], f"encoding differs for {text[:60]!r}"
            compared += 1
        decoded = [ours.decode(got, skip_special_tokens=skip_special) for skip_special in (False, True)]
        assert decoded == expected["decoded"], f"decoding differs for {text[:60]!r}"
        plain = ours.encode(text, add_special_tokens=False).ids
        assert (
            ours.decode(plain, skip_special_tokens=False) == text
        )  # byte-level BPE and SentencePiece: lossless
    return compared


@pytest.mark.slow
def test_qwen_tokenizer_matches_transformers(qwen05_gguf):
    texts = CORPUS + _wiki_texts(300)
    assert _compare(qwen05_gguf, texts) == len(texts)


@pytest.mark.slow
def test_smollm2_tokenizer_matches_transformers(smollm2_gguf):
    texts = CORPUS + _wiki_texts(300)
    compared = _compare(smollm2_gguf, texts, skip=_SMOLLM_DIGIT_SPLIT_DIFFERS)
    assert compared >= len(texts) - 5  # the digit-split cases are few; everything else is compared


@pytest.mark.slow
def test_gemma3_sentencepiece_tokenizer_matches_transformers():
    """gemma-3's SentencePiece vocabulary: no space prefix, user-defined runs of spaces and newlines."""
    gemma3_gguf = fetch_gguf("gemma-3-270m", progress=False)
    texts = (
        CORPUS + ["<start_of_turn>user\nHi  there<end_of_turn>\n<start_of_turn>model\n"] + _wiki_texts(300)
    )
    assert _compare(gemma3_gguf, texts) == len(texts)
    rebuilt, reference = read_gguf_tokenizer(gemma3_gguf), _reference_specials(gemma3_gguf)
    assert (
        (rebuilt.bos_token, rebuilt.eos_token)
        == (reference["bos_token"], reference["eos_token"])
        == ("<bos>", "<eos>")
    )
    assert rebuilt.add_bos_token and rebuilt.tokenizer().encode("Hi").ids[0] == reference["bos_token_id"]


@pytest.mark.slow
def test_smollm2_splits_digits_like_its_own_tokenizer(smollm2_gguf):
    ours = read_gguf_tokenizer(smollm2_gguf).tokenizer()
    pieces = [ours.id_to_token(i) for i in ours.encode("x  1\n\n2").ids]
    assert pieces == ["x", "ĠĠ", "1", "ĊĊ", "2"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2", "qwen05"])
def test_real_checkpoint_carries_template_and_special_tokens(request, model):
    gguf_path = request.getfixturevalue(f"{model}_gguf")
    reference = _reference_specials(gguf_path)
    ckpt = read_gguf(gguf_path)
    assert ckpt.chat_template == reference["chat_template"] and "<|im_start|>" in ckpt.chat_template
    assert (ckpt.bos_token, ckpt.eos_token) == (reference["bos_token"], reference["eos_token"])
    assert ckpt.bos_token_id == reference["bos_token_id"]
    assert ckpt.eos_token_ids[0] == reference["eos_token_id"] == reference["ids"]["<|im_end|>"]
    assert reference["ids"]["<|endoftext|>"] in ckpt.eos_token_ids
    assert ckpt.add_bos_token is False and ckpt.generation_defaults == {}
    if model == "qwen05":
        assert "<tool_call>" in ckpt.chat_template
