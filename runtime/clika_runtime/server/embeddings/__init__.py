"""embeddings."""
