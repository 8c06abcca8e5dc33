"""Sampler: greedy, temperature, top-k / top-p / min-p, penalties, seeds; decode policy validation."""

from __future__ import annotations

import numpy as np
import pytest

from clika_runtime.engine import sampler as sampler_module
from clika_runtime.engine.config import GenerationConfig, config_from_checkpoint
from clika_runtime.engine.sampler import Sampler, sample_rows


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def frequencies(logits: np.ndarray, config: GenerationConfig, n: int = 40_000, seed: int = 0) -> np.ndarray:
    draws = np.random.default_rng(seed).random(n)
    tokens = sample_rows(np.repeat(logits[None, :], n, axis=0), [config] * n, draws)
    return np.bincount(tokens, minlength=logits.shape[0]) / n


LOGITS = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0, 1.5, 0.2], dtype=np.float32)


def test_greedy_takes_the_argmax_per_row():
    logits = np.random.default_rng(1).normal(size=(5, 300)).astype(np.float32)
    s = Sampler(300)
    tokens = s.sample(logits, list(range(5)), [GenerationConfig()] * 5, [[1]] * 5)
    assert tokens.tolist() == np.argmax(logits, axis=1).tolist()
    assert GenerationConfig(temperature=0.8, top_k=1).greedy


def test_temperature_matches_softmax():
    for temperature in (1.0, 0.5, 2.0):
        freq = frequencies(LOGITS, GenerationConfig(temperature=temperature))
        np.testing.assert_allclose(freq, softmax(LOGITS / temperature), atol=0.01)


def test_top_k_keeps_the_k_most_likely_renormalized():
    freq = frequencies(LOGITS, GenerationConfig(temperature=1.0, top_k=3))
    keep = np.argsort(-LOGITS)[:3]
    expected = np.zeros_like(freq)
    expected[keep] = softmax(LOGITS[keep])
    np.testing.assert_allclose(freq, expected, atol=0.01)


def test_top_p_keeps_the_nucleus_including_the_crossing_token():
    p = softmax(LOGITS)
    order = np.argsort(-p)
    cum = np.cumsum(p[order])
    top_p = float(cum[2] - 0.01)  # the third token crosses the threshold: three survive
    freq = frequencies(LOGITS, GenerationConfig(temperature=1.0, top_p=top_p))
    expected = np.zeros_like(freq)
    expected[order[:3]] = p[order[:3]] / p[order[:3]].sum()
    np.testing.assert_allclose(freq, expected, atol=0.01)


def test_min_p_drops_tokens_below_a_fraction_of_the_best():
    p = softmax(LOGITS)
    freq = frequencies(LOGITS, GenerationConfig(temperature=1.0, min_p=0.3))
    kept = p >= 0.3 * p.max()
    expected = np.where(kept, p, 0) / p[kept].sum()
    np.testing.assert_allclose(freq, expected, atol=0.01)


def test_flat_distribution_reaches_past_the_candidates(monkeypatch):
    # A floor this high leaves only the four likely tokens as candidates: the
    # nucleus needs the flat tail too, so the row must fall back to a full sort.
    monkeypatch.setattr(sampler_module, "CANDIDATE_FLOOR", 0.5)
    logits = np.zeros(64, dtype=np.float32)
    logits[:4] = 2.0
    p = softmax(logits)
    freq = frequencies(logits, GenerationConfig(temperature=1.0, top_p=0.999))
    np.testing.assert_allclose(freq, p, atol=0.01)
    # min_p at or above the floor: the candidates hold every survivor.
    freq = frequencies(logits, GenerationConfig(temperature=1.0, min_p=0.5))
    np.testing.assert_allclose(freq[:4], 0.25, atol=0.01)
    assert freq[4:].sum() == 0


def test_top_p_applies_to_the_top_k_renormalized():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1], dtype=np.float32))
    # Over the top 2 renormalized (0.57, 0.43), top_p=0.5 keeps only the first;
    # over the full distribution it would keep the first two (0.4 < 0.5).
    freq = frequencies(logits, GenerationConfig(temperature=1.0, top_k=2, top_p=0.5))
    assert freq[0] == 1.0


@pytest.mark.parametrize("width", [1, 5, 256, 300, 1000])
def test_inverse_cdf_matches_a_plain_cumulative_sum(width):
    rng = np.random.default_rng(width)
    weights = rng.random((50, width)).astype(np.float32)
    weights[weights < 0.3] = 0  # zero-weight tokens are never picked
    weights[:, 0] = 0.5
    draws = rng.random(50)
    got = sampler_module.inverse_cdf(weights, draws)
    cdf = np.cumsum(weights.astype(np.float64), axis=1)
    expected = (cdf <= (draws * cdf[:, -1])[:, None]).sum(axis=1)
    assert np.array_equal(got, expected)
    assert (weights[np.arange(50), got] > 0).all()


def test_mixed_rows_each_follow_their_own_policy():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(4, 2000)).astype(np.float32) * 3
    configs = [
        GenerationConfig(),
        GenerationConfig(temperature=1.0, top_k=1),
        GenerationConfig(temperature=1.0, top_k=2),
        GenerationConfig(temperature=0.7, top_p=0.5),
    ]
    s = Sampler(2000)
    tokens = s.sample(logits, [1, 2, 3, 4], configs, [[0]] * 4)
    assert tokens[0] == np.argmax(logits[0]) and tokens[1] == np.argmax(logits[1])
    assert tokens[2] in np.argsort(-logits[2])[:2]


def test_repetition_penalty_follows_hugging_face():
    logits = np.array([[2.0, -2.0, 1.0, 0.5]], dtype=np.float32)
    config = GenerationConfig(repetition_penalty=4.0)
    s = Sampler(4)
    # Token 0 (seen in the prompt) drops from 2.0 to 0.5: token 2 (1.0) wins.
    assert s.sample(logits, [7], [config], [[0, 1]]).tolist() == [2]
    # Token 2 is now seen too: 0.25 vs 0.5 vs 0.5 -> token 0 and 3 tie at 0.5, argmax takes 0.
    assert s.sample(logits, [7], [config], [[]]).tolist() == [0]


def test_presence_and_frequency_penalties_count_the_reply():
    logits = np.array([[1.0, 0.9, 0.0]], dtype=np.float32)
    s = Sampler(3)
    config = GenerationConfig(frequency_penalty=0.06)
    picked = [int(s.sample(logits, [1], [config], [[0, 0, 0]])[0]) for _ in range(5)]
    # The prompt does not count; each reply use of token 0 costs 0.06: after two, token 1 leads.
    assert picked == [0, 0, 1, 0, 1]
    s2 = Sampler(3)
    presence = GenerationConfig(presence_penalty=0.2)
    picked = [int(s2.sample(logits, [1], [presence], [[]])[0]) for _ in range(3)]
    assert picked == [0, 1, 0] or picked == [0, 1, 1]
    assert picked[:2] == [0, 1]


def test_seeded_request_draws_the_same_alone_and_in_a_batch():
    rng = np.random.default_rng(5)
    steps = [rng.normal(size=(3, 500)).astype(np.float32) for _ in range(20)]
    config = GenerationConfig(temperature=1.0, top_p=0.9, seed=1234)
    other = GenerationConfig(temperature=1.3, seed=None)
    alone, batched = Sampler(500), Sampler(500)
    got_alone = [int(alone.sample(step[1:2], [10], [config], [[1]])[0]) for step in steps]
    got_batched = [
        int(batched.sample(step, [20, 10, 21], [other, config, GenerationConfig()], [[1]] * 3)[1])
        for step in steps
    ]
    assert got_alone == got_batched
    fresh = Sampler(500)
    assert [int(fresh.sample(step[1:2], [99], [config], [[1]])[0]) for step in steps] == got_alone
    assert len(set(got_alone)) > 3


def test_release_drops_request_state():
    s = Sampler(10)
    s.sample(np.zeros((1, 10), np.float32), [1], [GenerationConfig(temperature=1.0)], [[1]])
    assert s.num_states == 1
    s.release(1)
    assert s.num_states == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_new_tokens", 0),
        ("max_new_tokens", 2.5),
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -1),
        ("top_k", True),
        ("min_p", 1.2),
        ("repetition_penalty", 0),
        ("presence_penalty", 3.0),
        ("frequency_penalty", "a"),
        ("seed", -1),
        ("stop", ("",)),
        ("stop_token_ids", (-3,)),
        ("ignore_eos", 1),
    ],
)
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        GenerationConfig(**{field: value})
    with pytest.raises(ValueError, match=field):
        GenerationConfig().overlay({field: value})


def test_overlay_and_resolve():
    base = GenerationConfig(temperature=0.7, top_p=0.9)
    assert base.overlay({"max_new_tokens": 5}) == GenerationConfig(
        temperature=0.7, top_p=0.9, max_new_tokens=5
    )
    with pytest.raises(ValueError, match="'temprature'"):
        base.overlay({"temprature": 1.0})
    resolved = GenerationConfig.resolve(base, {"top_k": 4}, {"seed": 3})
    assert (resolved.temperature, resolved.top_p, resolved.top_k, resolved.seed) == (0.7, 0.9, 4, 3)
    assert GenerationConfig.resolve(base, GenerationConfig(), {}) == GenerationConfig()
    assert GenerationConfig(stop="END").stop == ("END",)
    with pytest.raises(ValueError, match="config must be"):
        GenerationConfig.resolve(base, 3, {})  # type: ignore[arg-type]


def test_checkpoint_defaults_read_like_hugging_face():
    assert config_from_checkpoint({}).greedy
    assert config_from_checkpoint({"temperature": 0.6, "do_sample": False}).greedy
    sampled = config_from_checkpoint({"temperature": 0.6, "top_p": 0.95, "top_k": 20, "bos_token_id": 1})
    assert (sampled.temperature, sampled.top_p, sampled.top_k) == (0.6, 0.95, 20)
    assert config_from_checkpoint({"do_sample": True}).temperature == 1.0


@pytest.mark.parametrize("top_k", [0, 40])
def test_a_vanishing_temperature_samples_the_argmax_not_nan(top_k):
    # Found by the fuzz tier: temperature 1e-300 made 1/T inf in float32 and the best token's
    # weight 0 * inf = NaN.
    logits = np.random.default_rng(2).normal(size=(3, 300)).astype(np.float32)
    config = GenerationConfig(temperature=1e-300, top_k=top_k, seed=1)
    with np.errstate(invalid="raise"):
        tokens = Sampler(300).sample(logits, list(range(3)), [config] * 3, [[1]] * 3)
    assert tokens.tolist() == np.argmax(logits, axis=1).tolist()
