"""What a tokenizer kind's builder hands back to the common assembly."""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer


@dataclass(frozen=True)
class KindTokenizer:
    """The model, splitting and decoder of one kind, plus llama.cpp's defaults for what a prompt gets.

    ``add_bos`` / ``add_sep`` are the defaults when the file has no ``add_bos_token`` /
    ``add_sep_token``; ``sep_id`` is the token a WordPiece input ends with.
    """

    tokenizer: Tokenizer
    add_bos: bool = False
    add_sep: bool = False
    sep_id: int | None = None
