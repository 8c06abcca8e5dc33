"""clika_export: turn checkpoints (Hugging Face folders, GGUF files) into model folders."""
