"""Gemma 4's BPE (``tokenizer.ggml.model == "gemma4"``): SentencePiece-style text, merges by rank.

Unlike byte-level BPE, tokens are raw UTF-8 with spaces written ``▁``, and
characters without a token fall back to ``<0xXX>`` byte tokens. llama.cpp splits
the text only into runs of newlines and runs of everything else, and takes a run
of newlines that is a whole token as is; no space is put in front. Here any run
that is a whole token is taken as is (``ignore_merges``), which can differ only
where the merges would not reach that token (on llama.cpp's test cases they
always do; a control token's text in a prompt whose specials are not parsed is
one such place). A prompt always starts with bos (llama.cpp
overrides the file's ``add_bos_token`` here).
"""

from __future__ import annotations

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf_file import GGUFMetadata
from clika_export.tokenizer_gguf.kind import KindTokenizer
from clika_export.tokenizer_gguf.merges import read_merges
from clika_export.tokenizer_gguf.pre_split import split_pre_tokenizer
from clika_export.tokenizer_gguf.sentencepiece import SPACE, marks_as_spaces
from clika_export.tokenizer_gguf.vocabulary import UNKNOWN, Vocabulary, unique_token_ids

_NEWLINE_RUNS = r"[^\n]+|[\n]+"


def build_gemma4_bpe(meta: GGUFMetadata, vocab: Vocabulary) -> KindTokenizer:
    unknown = next(iter(vocab.ids_of_type(UNKNOWN)), None)
    try:
        bpe = models.BPE(
            vocab=unique_token_ids(vocab),
            merges=read_merges(meta),
            dropout=None,
            unk_token=vocab.tokens[unknown] if unknown is not None else None,
            fuse_unk=False,
            byte_fallback=True,
            ignore_merges=True,
        )
    except Exception as exc:  # tokenizers raises plain Exception for bad merges
        raise CheckpointError(
            f"{meta.source}: GGUF vocabulary and merges do not form a BPE model: {exc}"
        ) from None
    tokenizer = Tokenizer(bpe)
    tokenizer.normalizer = normalizers.Replace(" ", SPACE)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(split_pre_tokenizer((_NEWLINE_RUNS,)))
    tokenizer.decoder = marks_as_spaces(space_prefix=False)
    return KindTokenizer(tokenizer, add_bos=True, force_bos=True)
