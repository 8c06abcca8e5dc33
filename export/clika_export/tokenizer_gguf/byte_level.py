"""Byte-level BPE (``tokenizer.ggml.model == "gpt2"``): GPT-2's byte alphabet, merges by rank.

Tokens outside the byte alphabet (rare, e.g. a mislabelled control token) are
respelled byte by byte, as transformers' GGUF loader does. Text is split into
words as llama.cpp splits it for the file's ``tokenizer.ggml.pre``.
"""

from __future__ import annotations

from functools import lru_cache

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf_file import GGUFMetadata
from clika_export.tokenizer_gguf.kind import KindTokenizer
from clika_export.tokenizer_gguf.merges import read_merges
from clika_export.tokenizer_gguf.pre_split import pre_split_for, split_pre_tokenizer
from clika_export.tokenizer_gguf.vocabulary import Vocabulary


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


def build_byte_level_bpe(meta: GGUFMetadata, vocab: Vocabulary) -> KindTokenizer:
    split = pre_split_for(meta)
    spelling = byte_alphabet()
    alphabet = set(spelling.values())
    model_vocab = {
        token if set(token) <= alphabet else "".join(spelling[b] for b in token.encode("utf-8")): index
        for index, token in enumerate(vocab.tokens)
    }
    try:
        bpe = models.BPE(
            vocab=model_vocab,
            merges=read_merges(meta),
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
            ignore_merges=split.ignore_merges,
        )
    except Exception as exc:  # tokenizers raises plain Exception for bad merges
        raise CheckpointError(
            f"{meta.source}: GGUF vocabulary and merges do not form a BPE model: {exc}"
        ) from None
    tokenizer = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([*split_pre_tokenizer(split.regexes), byte_level])
    tokenizer.decoder = decoders.ByteLevel()
    return KindTokenizer(tokenizer, add_bos=split.add_bos)
