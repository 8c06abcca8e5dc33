"""Embeddings from a decoder's final hidden states: pooled as the checkpoint asks, L2-normalized."""

from clika_runtime.embedding.embedder import Embedder, EmbeddingError, Embeddings, EmbeddingUnavailable
from clika_runtime.embedding.pooling import POOLING_MODES

__all__ = ["POOLING_MODES", "Embedder", "EmbeddingError", "Embeddings", "EmbeddingUnavailable"]
