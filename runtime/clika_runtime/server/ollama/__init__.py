"""Ollama's API: /api/chat, /api/generate, /api/version and the model routes (bodies in, NDJSON lines out)."""
