"""The vocabulary a GGUF carries: tokens, llama.cpp's token types, scores and special ids."""

from __future__ import annotations

import math
from dataclasses import dataclass

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf_file import GGUFMetadata

# llama.cpp's token types (tokenizer.ggml.token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

MAX_VOCAB = 1 << 21

# The ids whose tokens are special whatever their type says.
_SPECIAL_ID_KEYS = (
    "bos_token_id",
    "eos_token_id",
    "padding_token_id",
    "unknown_token_id",
    "seperator_token_id",  # llama.cpp's spelling
    "cls_token_id",
    "mask_token_id",
)


@dataclass(frozen=True)
class Vocabulary:
    """Tokens as stored (index = id) with their types; ``special_ids`` are the ids the metadata names."""

    source: str
    tokens: list[str]
    types: list[int]
    special_ids: frozenset[int]

    def __len__(self) -> int:
        return len(self.tokens)

    def is_special(self, index: int) -> bool:
        """Control and unknown tokens: matched whole only when specials are parsed, dropped when skipped."""
        return self.types[index] in (CONTROL, UNKNOWN) or index in self.special_ids

    def ids_of_type(self, kind: int) -> list[int]:
        return [index for index, token_type in enumerate(self.types) if token_type == kind]


def read_vocabulary(meta: GGUFMetadata) -> Vocabulary:
    tokens = meta.strings("tokenizer.ggml.tokens", max_items=MAX_VOCAB)
    if not tokens:
        raise CheckpointError(f"{meta.source}: tokenizer.ggml.tokens is empty")
    # An empty token could never be matched; llama.cpp renames it the same way so ids stay distinct.
    tokens = [token or f"[EMPTY_{index}]" for index, token in enumerate(tokens)]
    types = _token_types(meta, len(tokens))
    ids = (optional_id(meta, f"tokenizer.ggml.{key}", len(tokens)) for key in _SPECIAL_ID_KEYS)
    return Vocabulary(meta.source, tokens, types, frozenset(i for i in ids if i is not None))


def optional_id(meta: GGUFMetadata, key: str, count: int) -> int | None:
    return meta.integer(key, None, low=0, high=count - 1)


def read_scores(meta: GGUFMetadata, count: int) -> list[float]:
    """One finite score per token (SentencePiece ranks merges by the merged token's score)."""
    scores = meta.numbers("tokenizer.ggml.scores", None, max_items=MAX_VOCAB)
    if scores is None:
        raise CheckpointError(f"{meta.source}: a SentencePiece tokenizer needs tokenizer.ggml.scores")
    if len(scores) != count:
        raise CheckpointError(
            f"{meta.source}: tokenizer.ggml.scores has {len(scores)} entries for {count} tokens"
        )
    bad = next((i for i, score in enumerate(scores) if not math.isfinite(score)), None)
    if bad is not None:
        raise CheckpointError(
            f"{meta.source}: tokenizer.ggml.scores[{bad}] is {scores[bad]}, not a finite number"
        )
    return scores


def unique_token_ids(vocab: Vocabulary) -> dict[str, int]:
    """token -> id, refusing a vocabulary that spells two ids the same (llama.cpp refuses it too)."""
    ids: dict[str, int] = {}
    for index, token in enumerate(vocab.tokens):
        if token in ids:
            raise CheckpointError(
                f"{vocab.source}: tokenizer.ggml.tokens holds {token!r} twice (ids {ids[token]} and {index})"
            )
        ids[token] = index
    return ids


def _token_types(meta: GGUFMetadata, count: int) -> list[int]:
    types = meta.integers("tokenizer.ggml.token_type", None, max_items=MAX_VOCAB)
    if types is None:
        return [NORMAL] * count
    if len(types) != count:
        raise CheckpointError(
            f"{meta.source}: tokenizer.ggml.token_type has {len(types)} entries for {count} tokens"
        )
    return types
