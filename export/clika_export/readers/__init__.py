"""Checkpoint readers: each turns a source (a GGUF file, a Hugging Face folder) into a ``Checkpoint``."""
