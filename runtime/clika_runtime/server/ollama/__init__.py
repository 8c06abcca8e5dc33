"""ollama."""
