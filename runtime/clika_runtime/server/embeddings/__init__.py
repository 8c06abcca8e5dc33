"""Embeddings: OpenAI's /v1/embeddings and Ollama's /api/embed and /api/embeddings."""
