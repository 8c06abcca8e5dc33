"""WordPiece (``tokenizer.ggml.model == "bert"``): BERT's normalization, longest match first.

llama.cpp stores a BERT vocabulary with a ``▁`` in front of word-initial pieces
and continuation pieces bare (no ``##``). It lowercases and strips accents
(``tokenizer.ggml.normalizer.lowercase`` / ``.strip_accents``, both on unless
the file says otherwise), splits on whitespace, punctuation and CJK characters,
puts ``▁`` in front of every word and matches the longest piece at each
position; a word that cannot be covered becomes ``[UNK]`` whole. The same
spelling is kept here, so word pieces are looked up exactly as llama.cpp does.
Inputs are ``[CLS] ... [SEP]``; decoding writes ``▁`` as a space and undoes the
spaces before punctuation, as llama.cpp's does.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from clika_export.readers.gguf_file import GGUFMetadata
from clika_export.tokenizer_gguf.kind import KindTokenizer
from clika_export.tokenizer_gguf.sentencepiece import SPACE
from clika_export.tokenizer_gguf.vocabulary import UNKNOWN, Vocabulary, optional_id, unique_token_ids

# llama.cpp's BERT defaults when the file names no ids: [CLS] starts an input, [SEP] ends it.
_DEFAULT_CLS, _DEFAULT_SEP, _DEFAULT_UNK = 101, 102, 100
# Longer words become [UNK] rather than cost a quadratic search (llama.cpp bounds it by the longest token).
MAX_WORD_CHARS = 1000


def build_wordpiece(meta: GGUFMetadata, vocab: Vocabulary) -> KindTokenizer:
    count = len(vocab)
    unknown = optional_id(meta, "tokenizer.ggml.unknown_token_id", count)
    if unknown is None:
        unknown = next(iter(vocab.ids_of_type(UNKNOWN)), _DEFAULT_UNK if _DEFAULT_UNK < count else None)
    model = models.WordPiece(
        vocab=unique_token_ids(vocab),
        unk_token=vocab.tokens[unknown] if unknown is not None else "[UNK]",
        max_input_chars_per_word=MAX_WORD_CHARS,
        continuing_subword_prefix="",
    )
    tokenizer = Tokenizer(model)
    lowercase = meta.boolean("tokenizer.ggml.normalizer.lowercase", True)
    strip_accents = meta.boolean("tokenizer.ggml.normalizer.strip_accents", lowercase)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.BertPreTokenizer(),
            pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=False),
        ]
    )
    # One fused string, then WordPiece's clean-up of spaces before punctuation and contractions.
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.Fuse(), decoders.WordPiece(prefix="##", cleanup=True)]
    )
    cls_id = optional_id(meta, "tokenizer.ggml.cls_token_id", count)
    sep_id = optional_id(meta, "tokenizer.ggml.seperator_token_id", count)
    return KindTokenizer(
        tokenizer,
        add_bos=True,
        bos_id=cls_id if cls_id is not None else _default_id(_DEFAULT_CLS, count),
        add_sep=True,
        sep_id=sep_id if sep_id is not None else _default_id(_DEFAULT_SEP, count),
    )


def _default_id(index: int, count: int) -> int | None:
    return index if index < count else None
