"""clika_export: turn checkpoints (Hugging Face folders, GGUF files) into model folders."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def tokenizer_from_gguf(path: str | Path) -> Tokenizer:
    """The ``tokenizers.Tokenizer`` a GGUF file's metadata describes, tokenizing as llama.cpp does.

    Unsupported tokenizer kinds or pre-tokenizers raise ``CheckpointError`` naming
    them and what is covered.
    """
    # Imported on use, so `import clika_export` stays light.
    from clika_export.tokenizer_gguf import read_gguf_tokenizer

    return read_gguf_tokenizer(path).tokenizer()
