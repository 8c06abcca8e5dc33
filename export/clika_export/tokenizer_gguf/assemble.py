"""One ``tokenizers.Tokenizer`` from a GGUF's ``tokenizer.ggml.*`` metadata, whatever its kind.

The kind (``tokenizer.ggml.model``) picks the model, splitting and decoder;
what every kind shares is added here:

* token types: CONTROL and UNKNOWN tokens (and the ids the metadata names, such
  as bos/eos) become special added tokens, USER_DEFINED ones (e.g.
  ``<tool_call>``) plain added tokens, so both always match whole, as llama.cpp
  matches them before its tokenizer runs;
* bos/eos/pad ids, ``add_bos_token`` / ``add_eos_token`` (llama.cpp's per-kind
  defaults when absent) as a post-processor, and the chat template.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, processors

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf_file import GGUFFile, GGUFMetadata
from clika_export.tokenizer_gguf.byte_level import build_byte_level_bpe
from clika_export.tokenizer_gguf.kind import KindTokenizer
from clika_export.tokenizer_gguf.sentencepiece import build_sentencepiece
from clika_export.tokenizer_gguf.vocabulary import (
    CONTROL,
    USER_DEFINED,
    Vocabulary,
    optional_id,
    read_vocabulary,
)

MAX_TEMPLATE_CHARS = 1 << 20

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

# tokenizer.ggml.model -> (builder, what it is)
KINDS: dict[str, tuple[Callable[[GGUFMetadata, Vocabulary], KindTokenizer], str]] = {
    "gpt2": (build_byte_level_bpe, "byte-level BPE"),
    "llama": (build_sentencepiece, "SentencePiece"),
}


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
    if kind not in KINDS:
        covered = ", ".join(f"{name!r} ({what})" for name, (_, what) in sorted(KINDS.items()))
        raise CheckpointError(
            f"{meta.source}: tokenizer kind {kind!r} (tokenizer.ggml.model) is not supported; supported: {covered}"
        )
    vocab = read_vocabulary(meta)
    built = KINDS[kind][0](meta, vocab)
    tokenizer = built.tokenizer
    _add_special_tokens(tokenizer, vocab)

    count = len(vocab)
    bos_id = optional_id(meta, "tokenizer.ggml.bos_token_id", count)
    eos_id = optional_id(meta, "tokenizer.ggml.eos_token_id", count)
    add_bos = meta.boolean("tokenizer.ggml.add_bos_token", built.add_bos) and bos_id is not None
    add_eos = meta.boolean("tokenizer.ggml.add_eos_token", False) and eos_id is not None
    add_sep = meta.boolean("tokenizer.ggml.add_sep_token", built.add_sep) and built.sep_id is not None
    after = [eos_id] if add_eos else []
    after += [built.sep_id] if add_sep else []
    tokenizer.post_processor = _post_processor(vocab.tokens, [bos_id] if add_bos else [], after)
    chat_template = meta.string("tokenizer.chat_template", None, max_chars=MAX_TEMPLATE_CHARS)
    return GGUFTokenizer(
        tokenizer_json=tokenizer.to_str(),
        vocab_size=count,
        bos_token_id=bos_id,
        eos_token_ids=_end_of_generation_ids(meta, vocab, eos_id),
        pad_token_id=optional_id(meta, "tokenizer.ggml.padding_token_id", count),
        add_bos_token=add_bos,
        bos_token=vocab.tokens[bos_id] if bos_id is not None else None,
        eos_token=vocab.tokens[eos_id] if eos_id is not None else None,
        chat_template=chat_template or None,
    )


def _add_special_tokens(tokenizer: Tokenizer, vocab: Vocabulary) -> None:
    # A token the model spells differently (a byte-level respelling) is left out: adding it would grow the vocabulary.
    spelled = tokenizer.get_vocab()
    special = [
        AddedToken(token, normalized=False, special=True)
        for index, token in enumerate(vocab.tokens)
        if vocab.is_special(index) and token in spelled
    ]
    plain = [
        AddedToken(token, normalized=False, special=False)
        for index, token in enumerate(vocab.tokens)
        if vocab.types[index] == USER_DEFINED and not vocab.is_special(index) and token in spelled
    ]
    tokenizer.add_special_tokens(special)
    tokenizer.add_tokens(plain)


def _end_of_generation_ids(meta: GGUFMetadata, vocab: Vocabulary, eos_id: int | None) -> tuple[int, ...]:
    ids = [eos_id]
    ids += [
        optional_id(meta, f"tokenizer.ggml.{key}", len(vocab)) for key in ("eot_token_id", "eom_token_id")
    ]
    ids += [
        index
        for index, (token, kind) in enumerate(zip(vocab.tokens, vocab.types, strict=True))
        if kind == CONTROL and token in _END_OF_GENERATION_TEXTS
    ]
    return tuple(dict.fromkeys(i for i in ids if i is not None))  # ordered, primary eos first


def _post_processor(tokens: list[str], before: list[int], after: list[int]) -> processors.TemplateProcessing:
    """Prepend bos / append eos or sep when the file asks for it (add_bos_token / add_eos_token / add_sep_token)."""
    head = [tokens[i] for i in before]
    tail = [tokens[i] for i in after]
    single = [*head, "$A", *tail]
    pair = [*head, "$A", *tail, *head, "$B:1", *tail]
    used = {tokens[i]: i for i in (*before, *after)}
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=list(used.items()))
