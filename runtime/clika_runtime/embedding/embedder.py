"""Texts (or token-id lists) in, one normalized vector each out.

Inputs are tokenized as the checkpoint's tokenizer does it (its special tokens
included), checked (non-empty, within the context window unless ``truncate``),
sorted by length and run in batches: at most ``max_batch`` inputs and
``call_tokens`` padded tokens a call. An input longer than ``chunk_tokens``
runs alone, in calls of that many tokens over one scratch KV (attention's
scores grow with a call's tokens times the input's length: 8192 tokens in one
call took minutes and gigabytes), and ``should_stop`` is asked between its
calls. Sorting keeps the padding small; the vectors come back in input order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass

import numpy as np

from clika_runtime.contract.model_folder import ModelFolder
from clika_runtime.contract.step_graph import HIDDEN_STATES
from clika_runtime.embedding.pooling import POOLING_MODES, normalized, pool
from clika_runtime.engine.errors import CONTEXT_LENGTH_EXCEEDED, TurnError
from clika_runtime.engine.hidden_states import HiddenStateRunner
from clika_runtime.text.tokenizer import Tokenizer

# What a folder whose manifest names no pooling pools (exports before embeddings; checkpoints silent on it).
DEFAULT_POOLING = "mean"
DEFAULT_MAX_BATCH = 8
DEFAULT_CALL_TOKENS = 2048
DEFAULT_CHUNK_TOKENS = 512


class EmbeddingError(TurnError):
    """Input that cannot be embedded; ``index`` is the offending input's position (None: the request),
    ``field`` the argument at fault ("input" unless named) and ``code`` why, when typed."""

    def __init__(
        self, message: str, index: int | None = None, *, field: str = "input", code: str | None = None
    ) -> None:
        super().__init__(message, field=field, code=code)
        self.index = index


class EmbeddingCancelled(RuntimeError):
    """``should_stop`` ended an embedding between two of its calls."""


class EmbeddingUnavailable(EmbeddingError):
    """A model folder that cannot embed (exported before its graphs had the hidden_states output)."""


@dataclass(frozen=True)
class Embeddings:
    vectors: np.ndarray  # float32 [inputs, dimensions], each of norm 1
    token_counts: tuple[int, ...]  # the tokens each input ran as (after truncation)

    @property
    def prompt_tokens(self) -> int:
        return sum(self.token_counts)


@dataclass(eq=False, repr=False)
class Embedder:
    """Embeds inputs through ``runner`` with the checkpoint's ``pooling``."""

    runner: HiddenStateRunner
    tokenizer: Tokenizer
    pooling: str
    context_window: int
    _: KW_ONLY
    max_batch: int = DEFAULT_MAX_BATCH
    call_tokens: int = DEFAULT_CALL_TOKENS
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS

    def __post_init__(self) -> None:
        if self.pooling not in POOLING_MODES:
            raise EmbeddingError(
                f"the manifest's embedding pooling {self.pooling!r} is not one of {', '.join(POOLING_MODES)}"
            )

    @property
    def dimensions(self) -> int:
        return self.runner.arch.hidden_size

    def embed(
        self,
        inputs: Sequence[str | Sequence[int]],
        *,
        dimensions: int | None = None,
        truncate: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ) -> Embeddings:
        """Vectors of ``inputs`` (texts or token-id lists), ``dimensions`` long (None: the model's)."""
        if dimensions is not None and not 1 <= dimensions <= self.dimensions:
            raise EmbeddingError(
                f"dimensions must be between 1 and {self.dimensions}, got {dimensions}", field="dimensions"
            )
        if len(inputs) == 0:
            raise EmbeddingError("there is nothing to embed: the input is empty")
        rows = [self._tokens(item, index, truncate) for index, item in enumerate(inputs)]
        pooled = np.empty((len(rows), self.dimensions), dtype=np.float32)
        for batch in self._batches(rows):
            if should_stop is not None and should_stop():
                raise EmbeddingCancelled("the embedding was stopped")
            for index, hidden in zip(batch, self._hidden(rows, batch, should_stop), strict=True):
                pooled[index] = pool(hidden, self.pooling)
        return Embeddings(normalized(pooled, dimensions), tuple(len(row) for row in rows))

    def _hidden(
        self, rows: list[list[int]], batch: list[int], should_stop: Callable[[], bool] | None
    ) -> list[np.ndarray]:
        if len(batch) == 1 and len(rows[batch[0]]) > self.chunk_tokens:
            hidden = self.runner.run_chunked(rows[batch[0]], self.chunk_tokens, should_stop)
            if hidden is None:
                raise EmbeddingCancelled("the embedding was stopped")
            return [hidden]
        return self.runner.run([rows[i] for i in batch])

    def tokens(self, item: str | Sequence[int], *, truncate: bool = False) -> list[int]:
        """The token ids ``item`` runs as (checked as ``embed`` checks them)."""
        return self._tokens(item, 0, truncate)

    def _tokens(self, item: str | Sequence[int], index: int, truncate: bool) -> list[int]:
        if isinstance(item, str):
            if not item:
                raise EmbeddingError(f"input {index} is an empty string", index)
            ids = self.tokenizer.encode_as_checkpoint(item)
        else:
            ids = _token_ids(item, index, self.runner.arch.vocab_size)
        if not ids:
            raise EmbeddingError(f"input {index} has no tokens", index)
        if len(ids) > self.context_window:
            if not truncate:
                raise EmbeddingError(
                    f"input {index} is {len(ids)} tokens, more than the model's context window of "
                    f"{self.context_window} tokens",
                    index,
                    code=CONTEXT_LENGTH_EXCEEDED,
                )
            ids = ids[: self.context_window]
        return ids

    def _batches(self, rows: list[list[int]]) -> list[list[int]]:
        """Input indices grouped by length: each group at most ``max_batch`` and ``call_tokens`` padded."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        batches: list[list[int]] = []
        current: list[int] = []
        for index in order:
            width = len(rows[index])  # sorted: the longest of the group so far
            full = len(current) >= self.max_batch or (len(current) + 1) * width > self.call_tokens
            if current and (full or width > self.chunk_tokens):
                batches.append(current)
                current = []
            current.append(index)
        if current:
            batches.append(current)
        return batches


def _token_ids(item: object, index: int, vocab_size: int) -> list[int]:
    if not isinstance(item, Sequence) or isinstance(item, (str, bytes)):
        raise EmbeddingError(f"input {index} must be a string or a list of token ids", index)
    ids = list(item)
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise EmbeddingError(f"input {index} holds {token!r}, not a token id", index)
        if not 0 <= token < vocab_size:
            raise EmbeddingError(f"input {index} holds token id {token}, outside 0..{vocab_size - 1}", index)
    return [int(token) for token in ids]


def open_embedder(folder: ModelFolder, tokenizer: Tokenizer) -> Embedder:
    """The embedder over a loaded folder's own step graph session (no second copy of the weights)."""
    manifest = folder.manifest
    if HIDDEN_STATES not in folder.graph.outputs:
        raise EmbeddingUnavailable(
            f"{folder.path.name} was exported before embeddings: its {folder.graph.file} has no "
            f"{HIDDEN_STATES} output. With the export extra installed, `clika pull NAME` adds it to a "
            "pulled model's export (about a second); a folder exported by hand needs `clika-export` again"
        )
    runner = HiddenStateRunner(folder.session, folder.graph, manifest.architecture, manifest.context_window)
    pooling = str(manifest.embedding.get("pooling", DEFAULT_POOLING))
    return Embedder(runner, tokenizer, pooling, manifest.context_window)
