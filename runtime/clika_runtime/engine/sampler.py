"""Pick the next token of every sampled row at once, in NumPy.

One call takes the step's logits ``[rows, vocab]`` and each row's decode
policy. Penalties apply first (repetition over prompt and reply, presence and
frequency over the reply), then greedy rows take the argmax and the rest
sample: temperature, then the filters in Hugging Face's order (top-k, then
top-p over the top-k renormalized, then min-p), then one uniform draw from the
row's own generator. Each sampled row draws exactly one number a step from a
generator seeded by its request, so a seeded request's n-th draw depends only
on its seed and n: alone, in a batch, with or without a cached prefix.

The tokens are the same whenever the logits are, and the logits depend on how
the model's steps were shaped, in their last bits: ONNX Runtime's int4
products take another kernel for a step of one token than for a step of more,
whose rounding differs, and a sampled token near a boundary then flips. So a
seeded request gives the same text on the same prompt whether its prefix came
from the cache or not (a cached prompt computes its last two tokens again,
``kv_cache.RECOMPUTED_TAIL``; with one, 117 of 200 seeded SmolLM2-135M int4
replies differed, with two none), but with int4 weights not always the same text
alone as in a batch (decoding alone is a step of one token; in a batch, of
more), nor on a chat's next turn as on the same conversation read whole (the
cached prefix holds the earlier reply, decoded a token a step). Greedy replies
were the same in the cases measured; the figures are in
``benchmarks/features/seeded_prefix.py``'s header.

Speed: a top-k row touches the full vocabulary once (a partition of its
logits) and exponentiates only its k candidates. Other sampled rows take one
``exp`` pass; without filters an inverse CDF over block sums picks the token,
with top-p / min-p the candidates are every token within ``CANDIDATE_FLOOR`` of
the best (always a prefix of the sorted vocabulary), and a row whose filters
reach beyond them (a very flat distribution) falls back to a full sort, so
the result is exact. Penalties touch only the tokens a request has seen.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from clika_runtime.engine.config import GenerationConfig

# Without top-k, candidates are the tokens whose weight is at least this fraction of the best one's.
CANDIDATE_FLOOR = 1e-6
# Inverse-CDF block width: block sums first, then a cumulative sum inside one block.
_BLOCK = 256


class _RowState:
    """A request's sampling state: its generator and, with penalties, the tokens it has seen.

    Penalties touch only the tokens seen so far, so the state keeps their ids
    (``seen_ids``, prompt and reply) and the reply's counts (``counts``) sparse.
    """

    __slots__ = ("rng", "seen", "seen_ids", "counts")

    def __init__(self, config: GenerationConfig, prompt_ids: Sequence[int], vocab_size: int) -> None:
        self.rng = np.random.default_rng(config.seed)
        self.seen: np.ndarray | None = None
        self.seen_ids: np.ndarray = np.empty(0, dtype=np.int64)
        self.counts: dict[int, int] = {}
        if config.has_penalties:
            ids = np.unique(np.asarray(prompt_ids, dtype=np.int64))
            self.seen_ids = ids[(ids >= 0) & (ids < vocab_size)]
            self.seen = np.zeros(vocab_size, dtype=bool)
            self.seen[self.seen_ids] = True

    def record(self, token: int) -> None:
        if self.seen is None:
            return
        if not self.seen[token]:
            self.seen[token] = True
            self.seen_ids = np.append(self.seen_ids, token)
        self.counts[token] = self.counts.get(token, 0) + 1


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
        if all(c.stateless for c in configs):  # the common greedy batch: no state, no copies
            return logits.argmax(axis=1)
        stateful = [i for i, c in enumerate(configs) if not c.stateless]
        states = {i: self._state(request_ids[i], configs[i], prompts[i]) for i in stateful}
        logits = _apply_penalties(logits, configs, states)
        greedy = np.fromiter((c.greedy for c in configs), dtype=bool, count=len(configs))
        tokens = np.argmax(logits, axis=1) if greedy.any() else np.empty(len(configs), dtype=np.int64)
        if not greedy.all():
            rows = np.flatnonzero(~greedy)
            draws = np.fromiter((states[i].rng.random() for i in rows), dtype=np.float64, count=len(rows))
            picked = logits if rows.size == len(configs) else logits[rows]
            tokens[rows] = sample_rows(picked, [configs[i] for i in rows], draws)
        for i, state in states.items():
            state.record(int(tokens[i]))
        return tokens

    def _state(self, request_id: int, config: GenerationConfig, prompt: Sequence[int]) -> _RowState:
        state = self._states.get(request_id)
        if state is None or (config.has_penalties and state.seen is None):
            state = self._states[request_id] = _RowState(config, prompt, self.vocab_size)
        return state


def _apply_penalties(
    logits: np.ndarray, configs: Sequence[GenerationConfig], states: dict[int, _RowState]
) -> np.ndarray:
    rows = [i for i, c in enumerate(configs) if c.has_penalties]
    if not rows:
        return logits
    logits = np.array(logits, dtype=np.float32, copy=True)
    for i in rows:  # each row touches only the few tokens it has seen
        config, state, row = configs[i], states[i], logits[i]
        ids = state.seen_ids
        if config.repetition_penalty != 1.0 and ids.size:
            # Hugging Face's repetition penalty: shrink a seen token's logit toward "less likely".
            seen = row[ids]
            row[ids] = np.where(seen > 0, seen / config.repetition_penalty, seen * config.repetition_penalty)
        if state.counts and (config.presence_penalty or config.frequency_penalty):
            out = np.fromiter(state.counts, dtype=np.int64, count=len(state.counts))
            counts = np.fromiter(state.counts.values(), dtype=np.float32, count=len(state.counts))
            row[out] -= config.presence_penalty + config.frequency_penalty * counts
    return logits


def sample_rows(logits: np.ndarray, configs: Sequence[GenerationConfig], draws: np.ndarray) -> np.ndarray:
    """Sample one token per row of ``logits`` given each row's uniform draw in [0, 1)."""
    # Capped: a temperature as small as 1e-300 is inf in float32, and 0 * inf at the best token is
    # NaN; 1e30 keeps it the certain pick and every other weight exp(-huge) = 0 (the greedy limit).
    inverse_t = np.array([min(1.0 / c.temperature, 1e30) for c in configs], dtype=np.float32)[:, None]
    f = _Filters(
        np.array([c.top_k for c in configs], dtype=np.int64),
        np.array([c.top_p for c in configs], dtype=np.float64),
        np.array([c.min_p for c in configs], dtype=np.float64),
    )
    tokens = np.empty(len(configs), dtype=np.int64)
    ranked = np.flatnonzero(f.top_k > 0)
    if ranked.size:
        tokens[ranked] = _sample_top_k(
            _rows(logits, ranked), inverse_t[ranked], f.rows(ranked), draws[ranked]
        )
    rest = np.flatnonzero(f.top_k == 0)
    if rest.size:
        weights = _weights(_rows(logits, rest), inverse_t[rest])
        plain = (f.top_p[rest] >= 1.0) & (f.min_p[rest] <= 0.0)
        if plain.any():
            tokens[rest[plain]] = inverse_cdf(_rows(weights, np.flatnonzero(plain)), draws[rest[plain]])
        nucleus = np.flatnonzero(~plain)
        if nucleus.size:
            chosen = rest[nucleus]
            tokens[chosen] = _sample_nucleus(_rows(weights, nucleus), f.rows(chosen), draws[chosen])
    return tokens


def _rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]`` without a copy when ``rows`` is every row."""
    return array if rows.size == array.shape[0] else array[rows]


def _weights(logits: np.ndarray, inverse_t: np.ndarray) -> np.ndarray:
    """exp((logit - best) / T): 1.0 at each row's best token, computed in place in one fresh array."""
    weights = np.subtract(logits, logits.max(axis=1, keepdims=True), dtype=np.float32)
    weights *= inverse_t
    return np.exp(weights, out=weights)


class _Filters:
    __slots__ = ("top_k", "top_p", "min_p")

    def __init__(self, top_k: np.ndarray, top_p: np.ndarray, min_p: np.ndarray) -> None:
        self.top_k, self.top_p, self.min_p = top_k, top_p, min_p

    def rows(self, rows: np.ndarray) -> _Filters:
        return _Filters(self.top_k[rows], self.top_p[rows], self.min_p[rows])


def _sample_top_k(logits: np.ndarray, inverse_t: np.ndarray, f: _Filters, draws: np.ndarray) -> np.ndarray:
    """Rows with top-k: only their k best logits are ever exponentiated."""
    vocab = logits.shape[1]
    k = min(int(f.top_k.max()), vocab)
    if k < vocab:
        cand = np.argpartition(logits, vocab - k, axis=1)[:, vocab - k :]
    else:
        cand = np.broadcast_to(np.arange(vocab), logits.shape)
    cand_l = np.take_along_axis(logits, cand, axis=1)
    order = np.argsort(-cand_l, axis=1, kind="stable")
    cand, cand_l = np.take_along_axis(cand, order, axis=1), np.take_along_axis(cand_l, order, axis=1)
    cand_w = np.exp((cand_l - cand_l[:, :1]) * inverse_t)
    keep, _ = _keep_mask(cand_w, f, None, full=True)
    return _pick(cand, cand_w, keep, draws)


def _sample_nucleus(weights: np.ndarray, f: _Filters, draws: np.ndarray) -> np.ndarray:
    """Rows with top-p or min-p and no top-k: candidates above the floor, a full sort when they fall short."""
    total = weights.sum(axis=1).astype(np.float64)
    cand, cand_w = _above_floor(weights)
    keep, complete = _keep_mask(cand_w, f, total, full=cand.shape[1] == weights.shape[1])
    tokens = _pick(cand, cand_w, keep, draws)
    if not complete.all():  # a flat distribution reaches past the candidates: sort the whole row
        redo = np.flatnonzero(~complete)
        order = np.argsort(-weights[redo], axis=1, kind="stable")
        full_w = np.take_along_axis(weights[redo], order, axis=1)
        full_keep, _ = _keep_mask(full_w, f.rows(redo), total[redo], full=True)
        tokens[redo] = _pick(order, full_w, full_keep, draws[redo])
    return tokens


def _above_floor(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every token within ``CANDIDATE_FLOOR`` of its row's best, heaviest first, padded with weight 0."""
    rows_n, vocab = weights.shape
    flat = np.flatnonzero(weights >= CANDIDATE_FLOOR)
    rows, cols = flat // vocab, flat % vocab
    w = weights.reshape(-1)[flat]
    order = np.lexsort((-w, rows))
    rows, cols, w = rows[order], cols[order], w[order]
    counts = np.bincount(rows, minlength=rows_n)
    at = np.arange(rows.size) - (np.cumsum(counts) - counts)[rows]
    cand = np.zeros((rows_n, int(counts.max())), dtype=np.int64)
    cand_w = np.zeros(cand.shape, dtype=weights.dtype)
    cand[rows, at] = cols
    cand_w[rows, at] = w
    return cand, cand_w


def _keep_mask(
    cand_w: np.ndarray, f: _Filters, total: np.ndarray | None, *, full: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Which candidates survive the filters, and whether the candidates hold every survivor.

    Candidates are a prefix of the row sorted by weight; ``full`` says no
    survivor lies beyond them. ``total`` is the row's whole weight (None when
    every row has top-k, whose top-p reads the top k alone).
    """
    col = np.arange(cand_w.shape[1])[None, :]
    keep = (f.top_k[:, None] == 0) | (col < f.top_k[:, None])
    # top-p reads the distribution top-k left, renormalized (Hugging Face's and vLLM's order).
    kept_total = np.where(keep, cand_w, 0).sum(axis=1, dtype=np.float64)
    if total is not None:
        kept_total = np.where(f.top_k > 0, kept_total, total)
    share = cand_w / kept_total[:, None]
    cum = np.cumsum(share, axis=1, dtype=np.float64)
    # Keep the token that crosses the top_p mass too (the nucleus is never empty).
    keep &= (cum - share) < f.top_p[:, None]
    keep &= cand_w >= f.min_p[:, None] * cand_w[:, :1]
    keep &= cand_w > 0
    keep[:, 0] = True
    if full:
        return keep, np.ones(cand_w.shape[0], dtype=bool)
    complete = (f.top_k > 0) | ((f.top_p < 1.0) & (cum[:, -1] >= f.top_p)) | (f.min_p >= CANDIDATE_FLOOR)
    return keep, complete


def _pick(cand: np.ndarray, cand_w: np.ndarray, keep: np.ndarray, draws: np.ndarray) -> np.ndarray:
    index = inverse_cdf(np.where(keep, cand_w, 0.0).astype(np.float32, copy=False), draws)
    return np.take_along_axis(cand, index[:, None], axis=1)[:, 0]


def inverse_cdf(weights: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Per row, the index ``i`` where the cumulative weight first exceeds ``draw * total``.

    Block sums locate the block, then one block's cumulative sum the index,
    so the full row is summed but never cumulatively summed.
    """
    rows, width = weights.shape
    blocks = -(-width // _BLOCK)
    if blocks * _BLOCK != width:
        padded = np.zeros((rows, blocks * _BLOCK), dtype=weights.dtype)
        padded[:, :width] = weights
        weights = padded
    tiled = weights.reshape(rows, blocks, _BLOCK)
    cum_blocks = np.cumsum(tiled.sum(axis=2), axis=1, dtype=np.float64)
    target = draws * cum_blocks[:, -1]
    block = np.minimum((cum_blocks <= target[:, None]).sum(axis=1), blocks - 1)
    before = np.where(block > 0, cum_blocks[np.arange(rows), block - 1], 0.0)
    inner = tiled[np.arange(rows), block]
    inner_cum = np.cumsum(inner, axis=1, dtype=np.float64)
    index = (inner_cum <= (target - before)[:, None]).sum(axis=1)
    # Rounding can step past the block's last token of positive weight: stay on it.
    last = _BLOCK - 1 - np.argmax(inner[:, ::-1] > 0, axis=1)
    return block * _BLOCK + np.minimum(index, last)
