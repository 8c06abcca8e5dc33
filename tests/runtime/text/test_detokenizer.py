"""Streaming detokenizer (stream == whole decode, never a split character) and stop strings."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from clika_runtime.text.stops import StopMatcher
from clika_runtime.text.tokenizer import Tokenizer

TRICKY = [
    "Hello, world! Ça va? Größe, naïve café.",
    "日本語のテキストと中文字符混合 text 한국어도 있어요.",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷 and combining e\u0301 a\u0308 marks.",
    "Math ∑ x² ≤ ∞, arrows → ⇒, quotes «» “”, dashes — –.",
    "  leading spaces, tabs\tand\nnew lines\n\n  indented",
    "mixed😀中a😀b中😀",
]
CORPUS = TRICKY * 3 + ["the quick brown fox jumps over the lazy dog " * 3, "hello hello world world"]


def byte_level_bpe() -> HFTokenizer:
    """A GPT-2 style byte-level BPE with a small vocabulary, so characters split across tokens."""
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|end|>", "<|start|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def sentencepiece_like_bpe() -> HFTokenizer:
    """A Llama-style BPE: metaspace, byte fallback for unknown characters, leading space stripped."""
    tok = HFTokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    ascii_only = [line.encode("ascii", "ignore").decode() for line in CORPUS]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "</s>", *byte_tokens])
    tok.train_from_iterator(ascii_only, trainer)
    return tok


@pytest.fixture(scope="module", params=["byte_level", "sentencepiece"])
def tokenizer(request) -> Tokenizer:
    inner = byte_level_bpe() if request.param == "byte_level" else sentencepiece_like_bpe()
    return Tokenizer(inner)


def stream(tokenizer: Tokenizer, ids: list[int], prompt_ids: list[int] = (), skip: bool = True) -> list[str]:
    detok = tokenizer.streaming_decoder(prompt_ids=prompt_ids, skip_special_tokens=skip)
    pieces = [detok.push(t) for t in ids]
    pieces.append(detok.flush())
    assert detok.text == "".join(pieces)
    return pieces


@pytest.mark.parametrize("text", TRICKY)
def test_stream_equals_whole_decode_and_never_splits_a_character(tokenizer, text):
    ids = tokenizer.encode(text)
    assert len(ids) > 8
    pieces = stream(tokenizer, ids)
    assert "".join(pieces) == tokenizer.decode(ids)
    assert all("\ufffd" not in p for p in pieces)


def test_byte_level_splits_characters_across_tokens():
    tok = Tokenizer(byte_level_bpe())
    ids = tok.encode("👨‍👩‍👧‍👦")
    held = [tok.streaming_decoder().push_many(ids[:i]) for i in range(1, len(ids))]
    assert "" in held  # some prefix of the ids ends mid-character and shows nothing


@pytest.mark.parametrize("text", TRICKY[:3])
def test_stream_after_a_prompt_keeps_the_context(tokenizer, text):
    prompt_ids = tokenizer.encode("hello world")
    reply_ids = tokenizer.encode(text)
    whole = tokenizer.decode(prompt_ids + reply_ids)
    expected = whole[len(tokenizer.decode(prompt_ids)) :]
    assert "".join(stream(tokenizer, reply_ids, prompt_ids)) == expected


def test_random_token_sequences_stream_like_whole(tokenizer):
    rng = random.Random(0)
    regular = [i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_token_ids]
    for _ in range(50):
        ids = [rng.choice(regular) for _ in range(rng.randint(1, 30))]
        assert "".join(stream(tokenizer, ids)) == tokenizer.decode(ids)


def test_special_tokens_are_skipped_or_shown():
    tok = Tokenizer(byte_level_bpe())
    end = tok.token_to_id("<|end|>")
    ids = tok.encode("hi there") + [end] + tok.encode(" more")
    assert "".join(stream(tok, ids)) == "hi there more"
    assert "".join(stream(tok, ids, skip=False)) == "hi there<|end|> more"
    assert end in tok.special_token_ids


def test_flush_shows_an_unfinished_character_as_replacement():
    tok = Tokenizer(byte_level_bpe())
    ids = tok.encode("ok 👍")
    detok = tok.streaming_decoder()
    for t in ids[:-1]:
        detok.push(t)
    tail = detok.flush()
    assert tail.endswith("\ufffd") and detok.text.startswith("ok")


def test_bos_comes_from_the_model_not_the_post_processor():
    inner = byte_level_bpe()
    start = inner.token_to_id("<|start|>")
    tok = Tokenizer(inner, bos_token_id=start, add_bos_token=True)
    assert tok.encode("hi")[0] == start
    assert tok.encode("<|start|>hi").count(start) == 1
    assert start not in tok.encode("hi", add_special_tokens=False)
    assert tok.bos_token == "<|start|>"
    assert Tokenizer(inner, bos_token_id=start).encode("hi")[0] != start


# Stop strings -------------------------------------------------------------------------


def run_stops(stops: list[str], pieces: list[str]) -> tuple[str, str | None, list[str]]:
    matcher = StopMatcher(stops)
    shown = [matcher.push(p) for p in pieces]
    shown.append(matcher.flush())
    return "".join(shown), matcher.matched, shown


def test_stop_across_piece_boundaries_is_never_shown():
    text, matched, shown = run_stops(["</answer>"], ["The res", "ult</an", "swer> trailing"])
    assert text == "The result" and matched == "</answer>"
    assert all("<" not in s for s in shown)


def test_partial_stop_is_held_then_released():
    text, matched, shown = run_stops(["STOP"], ["go ST", "ART now"])
    assert shown[0] == "go " and text == "go START now" and matched is None


def test_earliest_of_several_stops_wins():
    text, matched, _ = run_stops(["world", "lo w"], ["hello world"])
    assert text == "hel" and matched == "lo w"


def test_stop_at_the_start_and_split_by_characters():
    text, matched, _ = run_stops(["\n\n"], ["\n", "\n", "after"])
    assert text == "" and matched == "\n\n"
    text, matched, _ = run_stops(["abc"], list("xxabxabcyy"))
    assert text == "xxabx" and matched == "abc"


def test_no_stops_pass_through_and_unfinished_prefix_flushes():
    assert run_stops([], ["a", "b"])[0] == "ab"
    text, matched, shown = run_stops(["<end>"], ["value <en"])
    assert shown[0] == "value " and text == "value <en" and matched is None


def test_nothing_after_a_match():
    matcher = StopMatcher(["x"])
    assert matcher.push("abxcd") == "ab"
    assert matcher.push("more") == "" and matcher.flush() == ""
