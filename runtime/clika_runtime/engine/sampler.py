"""Pick the next token of every sampled row at once, in NumPy.

One call takes the step's logits ``[rows, vocab]`` and each row's decode
policy. Penalties apply first (repetition over prompt and reply, presence and
frequency over the reply), then greedy rows take the argmax and the rest
sample: temperature, then top-k / top-p / min-p over the most likely
candidates, then one uniform draw from the row's own generator. Each sampled
row draws exactly one number a step from a generator seeded by its request, so
a seeded request produces the same tokens alone and in any batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from clika_runtime.engine.types import GenerationConfig

# Filtered rows first look at this many most likely tokens; a row whose
# filters need more (a flat distribution under top_p) falls back to a full sort.
CANDIDATES = 1024


class _RowState:
    """A request's sampling state: its generator and, with penalties, its token counts."""

    __slots__ = ("rng", "seen", "counts")

    def __init__(self, config: GenerationConfig, prompt_ids: Sequence[int], vocab_size: int) -> None:
        self.rng = np.random.default_rng(config.seed)
        self.seen: np.ndarray | None = None
        self.counts: np.ndarray | None = None
        if config.has_penalties:
            self.seen = np.zeros(vocab_size, dtype=bool)
            ids = np.asarray(prompt_ids, dtype=np.int64)
            self.seen[ids[(ids >= 0) & (ids < vocab_size)]] = True
            self.counts = np.zeros(vocab_size, dtype=np.float32)

    def record(self, token: int) -> None:
        if self.seen is not None and self.counts is not None:
            self.seen[token] = True
            self.counts[token] += 1.0


class Sampler:
    """Vectorized sampling with per-request state (``release`` it when a request ends)."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self._states: dict[int, _RowState] = {}

    def release(self, request_id: int) -> None:
        self._states.pop(request_id, None)

    @property
    def num_states(self) -> int:
        return len(self._states)

    def sample(
        self,
        logits: np.ndarray,
        request_ids: Sequence[int],
        configs: Sequence[GenerationConfig],
        prompts: Sequence[Sequence[int]],
    ) -> np.ndarray:
        """The next token of each row of ``logits`` (int64 ``[rows]``).

        ``prompts[i]`` is read only the first time a request is seen (to seed
        its repetition penalty); later steps use the counts kept here.
        """
        states = [self._state(r, c, p) for r, c, p in zip(request_ids, configs, prompts, strict=True)]
        logits = _apply_penalties(logits, configs, states)
        tokens = np.empty(len(configs), dtype=np.int64)
        greedy = np.fromiter((c.greedy for c in configs), dtype=bool, count=len(configs))
        if greedy.any():
            tokens[greedy] = np.argmax(logits[greedy], axis=1)
        if not greedy.all():
            rows = np.flatnonzero(~greedy)
            picked = [configs[i] for i in rows]
            draws = np.fromiter((states[i].rng.random() for i in rows), dtype=np.float64, count=len(rows))
            tokens[rows] = sample_rows(logits[rows], picked, draws)
        for state, token in zip(states, tokens.tolist(), strict=True):
            state.record(token)
        return tokens

    def _state(self, request_id: int, config: GenerationConfig, prompt: Sequence[int]) -> _RowState:
        state = self._states.get(request_id)
        if state is None:
            state = self._states[request_id] = _RowState(config, prompt, self.vocab_size)
        return state


def _apply_penalties(
    logits: np.ndarray, configs: Sequence[GenerationConfig], states: Sequence[_RowState]
) -> np.ndarray:
    rows = [i for i, c in enumerate(configs) if c.has_penalties]
    if not rows:
        return logits
    logits = np.array(logits, dtype=np.float32, copy=True)
    sub = logits[rows]
    seen = np.stack([states[i].seen for i in rows])  # type: ignore[misc]
    counts = np.stack([states[i].counts for i in rows])  # type: ignore[misc]
    rep = np.array([configs[i].repetition_penalty for i in rows], dtype=np.float32)[:, None]
    presence = np.array([configs[i].presence_penalty for i in rows], dtype=np.float32)[:, None]
    frequency = np.array([configs[i].frequency_penalty for i in rows], dtype=np.float32)[:, None]
    # Hugging Face's repetition penalty: shrink a seen token's logit toward "less likely".
    penalized = np.where(sub > 0, sub / rep, sub * rep)
    sub = np.where(seen, penalized, sub)
    sub = sub - presence * (counts > 0) - frequency * counts
    logits[rows] = sub
    return logits


def sample_rows(logits: np.ndarray, configs: Sequence[GenerationConfig], draws: np.ndarray) -> np.ndarray:
    """Sample one token per row of ``logits`` given each row's uniform draw in [0, 1)."""
    n, vocab = logits.shape
    temperature = np.array([c.temperature for c in configs], dtype=np.float32)[:, None]
    scaled = logits.astype(np.float32, copy=False) / temperature
    weights = np.exp(scaled - scaled.max(axis=1, keepdims=True))
    total = weights.sum(axis=1, dtype=np.float64)
    probs = weights / total[:, None].astype(np.float32)
    top_k = np.array([c.top_k for c in configs], dtype=np.int64)
    top_p = np.array([c.top_p for c in configs], dtype=np.float64)
    min_p = np.array([c.min_p for c in configs], dtype=np.float64)
    filtered = (top_k > 0) | (top_p < 1.0) | (min_p > 0.0)
    tokens = np.empty(n, dtype=np.int64)
    plain = np.flatnonzero(~filtered)
    if plain.size:
        tokens[plain] = _inverse_cdf(probs[plain], draws[plain])
    rows = np.flatnonzero(filtered)
    if rows.size:
        tokens[rows] = _sample_filtered(probs[rows], top_k[rows], top_p[rows], min_p[rows], draws[rows])
    return tokens


def _inverse_cdf(weights: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Index of the first cumulative weight reaching ``draw * total``, per row."""
    cdf = np.cumsum(weights, axis=1, dtype=np.float64)
    target = draws * cdf[:, -1]
    # Counting entries at or below the target lands on a token of positive weight.
    index = (cdf <= target[:, None]).sum(axis=1)
    return np.minimum(index, weights.shape[1] - 1)


def _sample_filtered(
    probs: np.ndarray, top_k: np.ndarray, top_p: np.ndarray, min_p: np.ndarray, draws: np.ndarray
) -> np.ndarray:
    vocab = probs.shape[1]
    limit = np.where(top_k > 0, top_k, CANDIDATES)
    k = int(min(vocab, limit.max()))
    cand, cand_p = _top_candidates(probs, k)
    keep, complete = _keep_mask(cand_p, top_k, top_p, min_p, full=k == vocab)
    if not complete.all():
        redo = np.flatnonzero(~complete)
        full_cand, full_p = _top_candidates(probs[redo], vocab)
        full_keep, _ = _keep_mask(full_p, top_k[redo], top_p[redo], min_p[redo], full=True)
        tokens = _pick(cand, cand_p, keep, draws)
        tokens[redo] = _pick(full_cand, full_p, full_keep, draws[redo])
        return tokens
    return _pick(cand, cand_p, keep, draws)


def _top_candidates(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most likely token ids of each row, most likely first, and their probabilities."""
    if k < probs.shape[1]:
        cand = np.argpartition(-probs, k - 1, axis=1)[:, :k]
    else:
        cand = np.broadcast_to(np.arange(probs.shape[1]), probs.shape)
    cand_p = np.take_along_axis(probs, cand, axis=1)
    order = np.argsort(-cand_p, axis=1, kind="stable")
    return np.take_along_axis(cand, order, axis=1), np.take_along_axis(cand_p, order, axis=1)


def _keep_mask(
    cand_p: np.ndarray, top_k: np.ndarray, top_p: np.ndarray, min_p: np.ndarray, *, full: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Which candidates survive the filters, and whether the candidates hold every survivor."""
    n, k = cand_p.shape
    col = np.arange(k)[None, :]
    keep = np.ones((n, k), dtype=bool)
    keep &= (top_k[:, None] == 0) | (col < top_k[:, None])
    cum = np.cumsum(cand_p, axis=1, dtype=np.float64)
    # Keep the token that crosses the top_p mass too (the nucleus is never empty).
    keep &= (cum - cand_p) < top_p[:, None]
    keep &= cand_p >= (min_p[:, None] * cand_p[:, :1])
    keep[:, 0] = True
    if full:
        return keep, np.ones(n, dtype=bool)
    last = cand_p[:, -1]
    complete = (
        (top_k > 0) | ((top_p < 1.0) & (cum[:, -1] >= top_p)) | ((min_p > 0) & (last < min_p * cand_p[:, 0]))
    )
    return keep, complete


def _pick(cand: np.ndarray, cand_p: np.ndarray, keep: np.ndarray, draws: np.ndarray) -> np.ndarray:
    index = _inverse_cdf(np.where(keep, cand_p, 0.0), draws)
    return np.take_along_axis(cand, index[:, None], axis=1)[:, 0]
