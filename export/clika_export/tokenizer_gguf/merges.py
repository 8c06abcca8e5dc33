"""``tokenizer.ggml.merges``: BPE merges in rank order, each two tokens split by one space."""

from __future__ import annotations

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf_file import GGUFMetadata
from clika_export.tokenizer_gguf.vocabulary import MAX_VOCAB


def read_merges(meta: GGUFMetadata) -> list[tuple[str, str]]:
    merges = []
    for number, merge in enumerate(meta.strings("tokenizer.ggml.merges", [], max_items=MAX_VOCAB * 2)):
        pair = merge.split(" ")
        if len(pair) != 2 or not all(pair):
            raise CheckpointError(
                f"{meta.source}: merge #{number} {merge!r} is not two tokens split by one space"
            )
        merges.append((pair[0], pair[1]))
    if not merges:
        raise CheckpointError(f"{meta.source}: a BPE tokenizer needs tokenizer.ggml.merges")
    return merges
