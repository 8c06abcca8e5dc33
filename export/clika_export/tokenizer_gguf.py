"""Rebuild a ``tokenizers`` tokenizer (tokenizer.json) from a GGUF file's metadata.

A GGUF carries its vocabulary as ``tokenizer.ggml.*`` keys instead of a
tokenizer.json. This module supports the byte-level BPE vocabularies
(``tokenizer.ggml.model == "gpt2"``) of the llama and qwen2 families:

* vocabulary and merges as stored (tokens outside the byte alphabet are
  respelled byte by byte, as transformers' GGUF loader does);
* token types: CONTROL tokens become special added tokens, USER_DEFINED ones
  (e.g. ``<tool_call>``) plain added tokens, so both always match whole;
* the pre-tokenizer named by ``tokenizer.ggml.pre``, spelled as llama.cpp
  splits text for that name (``smollm``: digits one by one, then GPT-2's regex;
  ``qwen2``: Qwen2's regex);
* bos/eos/pad ids, ``add_bos_token``/``add_eos_token`` and the chat template.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf_file import GGUFFile, GGUFMetadata

# llama.cpp's token types (tokenizer.ggml.token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Tokens llama.cpp also ends generation on when the file marks them CONTROL
# (besides the eos/eot/eom ids the metadata names).
_END_OF_GENERATION_TEXTS = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
)

_QWEN2_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

MAX_VOCAB = 1 << 21
MAX_TEMPLATE_CHARS = 1 << 20


@dataclass(frozen=True)
class GGUFTokenizer:
    """What a GGUF says about its tokenizer, ready for a Checkpoint and a manifest."""

    tokenizer_json: str
    vocab_size: int
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None
    add_bos_token: bool
    bos_token: str | None
    eos_token: str | None
    chat_template: str | None

    def tokenizer(self) -> Tokenizer:
        return Tokenizer.from_str(self.tokenizer_json)


def read_gguf_tokenizer(path: str | Path) -> GGUFTokenizer:
    """The tokenizer of a GGUF file (``read_gguf`` builds it as part of a checkpoint)."""
    return tokenizer_from_metadata(GGUFMetadata(GGUFFile(path)))


def tokenizer_from_metadata(meta: GGUFMetadata) -> GGUFTokenizer:
    """Build the tokenizer a GGUF's metadata describes; unsupported kinds raise CheckpointError."""
    kind = meta.string("tokenizer.ggml.model")
    if kind != "gpt2":
        raise CheckpointError(
            f"{meta.source}: tokenizer kind {kind!r} (tokenizer.ggml.model) is not supported; "
            "supported: 'gpt2' (byte-level BPE)"
        )
    tokens = meta.strings("tokenizer.ggml.tokens", max_items=MAX_VOCAB)
    if not tokens:
        raise CheckpointError(f"{meta.source}: tokenizer.ggml.tokens is empty")
    types = _token_types(meta, len(tokens))
    merges = _merges(meta)
    tokenizer = _byte_level_bpe(meta, tokens, merges)
    _add_special_tokens(tokenizer, tokens, types, _special_ids(meta, len(tokens)))
    tokenizer.pre_tokenizer = _pre_tokenizer(meta)
    tokenizer.decoder = decoders.ByteLevel()

    bos_id = _optional_id(meta, "tokenizer.ggml.bos_token_id", len(tokens))
    eos_id = _optional_id(meta, "tokenizer.ggml.eos_token_id", len(tokens))
    add_bos = meta.boolean("tokenizer.ggml.add_bos_token", False)
    add_eos = meta.boolean("tokenizer.ggml.add_eos_token", False)
    tokenizer.post_processor = _post_processor(
        meta, tokens, bos_id if add_bos else None, eos_id if add_eos else None
    )
    chat_template = meta.string("tokenizer.chat_template", None, max_chars=MAX_TEMPLATE_CHARS)
    return GGUFTokenizer(
        tokenizer_json=tokenizer.to_str(),
        vocab_size=len(tokens),
        bos_token_id=bos_id,
        eos_token_ids=_end_of_generation_ids(meta, tokens, types, eos_id),
        pad_token_id=_optional_id(meta, "tokenizer.ggml.padding_token_id", len(tokens)),
        add_bos_token=add_bos,
        bos_token=tokens[bos_id] if bos_id is not None else None,
        eos_token=tokens[eos_id] if eos_id is not None else None,
        chat_template=chat_template or None,
    )


# -- vocabulary ----------------------------------------------------------------


@lru_cache(maxsize=1)
def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character table that byte-level BPE vocabularies are spelled in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def _byte_level_bpe(meta: GGUFMetadata, tokens: list[str], merges: list[tuple[str, str]]) -> Tokenizer:
    spelling = byte_alphabet()
    alphabet = set(spelling.values())
    # A token outside the byte alphabet (rare, e.g. a mislabelled control token) is respelled byte by byte.
    vocab = {
        token if set(token) <= alphabet else "".join(spelling[b] for b in token.encode("utf-8")): index
        for index, token in enumerate(tokens)
    }
    try:
        bpe = models.BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
            ignore_merges=False,
        )
    except Exception as exc:  # tokenizers raises plain Exception for bad merges
        raise CheckpointError(
            f"{meta.source}: GGUF vocabulary and merges do not form a BPE model: {exc}"
        ) from None
    return Tokenizer(bpe)


def _merges(meta: GGUFMetadata) -> list[tuple[str, str]]:
    merges = []
    for number, merge in enumerate(meta.strings("tokenizer.ggml.merges", [], max_items=MAX_VOCAB * 2)):
        pair = merge.split(" ")
        if len(pair) != 2 or not all(pair):
            raise CheckpointError(
                f"{meta.source}: merge #{number} {merge!r} is not two tokens split by one space"
            )
        merges.append((pair[0], pair[1]))
    if not merges:
        raise CheckpointError(f"{meta.source}: a byte-level BPE tokenizer needs tokenizer.ggml.merges")
    return merges


def _token_types(meta: GGUFMetadata, count: int) -> list[int]:
    types = meta.integers("tokenizer.ggml.token_type", None, max_items=MAX_VOCAB)
    if types is None:
        return [NORMAL] * count
    if len(types) != count:
        raise CheckpointError(
            f"{meta.source}: tokenizer.ggml.token_type has {len(types)} entries for {count} tokens"
        )
    return types


def _add_special_tokens(
    tokenizer: Tokenizer, tokens: list[str], types: list[int], special_ids: set[int]
) -> None:
    alphabet = set(byte_alphabet().values())
    vocab = tokenizer.get_vocab()
    # A control token spelled outside the byte alphabet is a mislabelled one; adding it would grow the vocabulary.
    special = [
        AddedToken(token, normalized=False, special=True)
        for index, (token, kind) in enumerate(zip(tokens, types, strict=True))
        if (kind == CONTROL or index in special_ids) and set(token) <= alphabet
    ]
    plain = [
        AddedToken(token, normalized=False, special=False)
        for token, kind in zip(tokens, types, strict=True)
        if kind == USER_DEFINED and token in vocab
    ]
    tokenizer.add_special_tokens(special)
    tokenizer.add_tokens(plain)


def _special_ids(meta: GGUFMetadata, count: int) -> set[int]:
    keys = ("bos_token_id", "eos_token_id", "padding_token_id", "unknown_token_id")
    ids = (_optional_id(meta, f"tokenizer.ggml.{key}", count) for key in keys)
    return {token_id for token_id in ids if token_id is not None}


def _optional_id(meta: GGUFMetadata, key: str, count: int) -> int | None:
    return meta.integer(key, None, low=0, high=count - 1)


def _end_of_generation_ids(
    meta: GGUFMetadata, tokens: list[str], types: list[int], eos_id: int | None
) -> tuple[int, ...]:
    ids = [eos_id]
    ids += [
        _optional_id(meta, f"tokenizer.ggml.{key}", len(tokens)) for key in ("eot_token_id", "eom_token_id")
    ]
    ids += [
        i
        for i, (t, kind) in enumerate(zip(tokens, types, strict=True))
        if kind == CONTROL and t in _END_OF_GENERATION_TEXTS
    ]
    return tuple(dict.fromkeys(i for i in ids if i is not None))  # ordered, primary eos first


# -- text splitting and post-processing --------------------------------------------


def _pre_tokenizer(meta: GGUFMetadata) -> pre_tokenizers.PreTokenizer:
    name = meta.string("tokenizer.ggml.pre", "default")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if name in ("default", "gpt-2", "gpt2"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name in ("smollm", "starcoder", "refact"):
        # Every digit on its own, then GPT-2's regex: llama.cpp's split for these names.
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    splits = {
        "qwen2": _QWEN2_SPLIT,
        "deepseek-r1-qwen": _QWEN2_SPLIT,
        "llama3": _LLAMA3_SPLIT,
        "llama-bpe": _LLAMA3_SPLIT,
    }
    if name in splits:
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(splits[name]), behavior="isolated"), byte_level]
        )
    known = ", ".join(["default", "gpt-2", "smollm", "starcoder", "refact", *splits])
    raise CheckpointError(
        f"{meta.source}: pre-tokenizer {name!r} (tokenizer.ggml.pre) is not supported; supported: {known}"
    )


def _post_processor(
    meta: GGUFMetadata, tokens: list[str], bos_id: int | None, eos_id: int | None
) -> processors.TemplateProcessing:
    """Prepend bos / append eos when the file asks for it (add_bos_token / add_eos_token)."""
    before = [tokens[bos_id]] if bos_id is not None else []
    after = [tokens[eos_id]] if eos_id is not None else []
    single = [*before, "$A", *after]
    pair = [*before, "$A", *after, *before, "$B:1", *after]
    used = {tokens[i]: i for i in (bos_id, eos_id) if i is not None}
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=list(used.items()))
