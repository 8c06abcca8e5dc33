"""Rebuild a ``tokenizers`` tokenizer (tokenizer.json) from a GGUF file's metadata.

A GGUF carries its vocabulary as ``tokenizer.ggml.*`` keys instead of a
tokenizer.json. One module per kind llama.cpp reads (``tokenizer.ggml.model``)
builds the model, splitting and decoder, matching llama.cpp's tokenization;
``assemble`` adds what every kind shares (special tokens, bos/eos, template).
"""

from clika_export.tokenizer_gguf.assemble import (
    KINDS,
    GGUFTokenizer,
    read_gguf_tokenizer,
    tokenizer_from_metadata,
)
from clika_export.tokenizer_gguf.byte_level import byte_alphabet

__all__ = ["KINDS", "GGUFTokenizer", "byte_alphabet", "read_gguf_tokenizer", "tokenizer_from_metadata"]
