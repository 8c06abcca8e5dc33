"""Rotary frequencies of every rope type against transformers' own, read from the same config.json."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from support.lazy import torch, transformers

from clika_export.checkpoint import CheckpointError
from clika_export.graph.rope import SUPPORTED_ROPE_TYPES, cos_sin_caches, inverse_frequencies
from clika_export.readers.hf import rope_settings

HEAD_DIM = 32
BASE = dict(hidden_size=128, num_attention_heads=4, head_dim=HEAD_DIM, max_position_embeddings=256)
SHORT = [1.0 + 0.1 * i for i in range(HEAD_DIM // 2)]
LONG = [1.0 + 0.7 * i for i in range(HEAD_DIM // 2)]

CASES = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    "yarn-mscale": {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 32,
        "mscale": 0.7,
        "mscale_all_dim": 0.5,
        "beta_fast": 16,
        "beta_slow": 2,
    },
    "longrope": {
        "rope_type": "longrope",
        "short_factor": SHORT,
        "long_factor": LONG,
        "original_max_position_embeddings": 64,
    },
}


def _transformers(config, kind: str, seq_len: int | None) -> tuple[np.ndarray, float]:
    init_functions = importlib.import_module("transformers.modeling_rope_utils").ROPE_INIT_FUNCTIONS
    inv_freq, factor = init_functions[kind](config, torch.device("cpu"), seq_len)
    return inv_freq.numpy(), float(factor)


@pytest.mark.parametrize("name", sorted(CASES))
def test_frequencies_and_attention_factor_match_transformers(name: str) -> None:
    params = {"rope_theta": 10000.0, **CASES[name]}
    config = transformers.LlamaConfig(**BASE, rope_parameters=params)
    theta, scaling = rope_settings(config.to_dict(), "full_attention")
    kind = params["rope_type"]
    # Context windows inside the original one, then beyond it (longrope switches factors there).
    for context in (64, 256):
        ours, ours_factor = inverse_frequencies(HEAD_DIM, theta, scaling, context)
        theirs, their_factor = _transformers(config, kind, context if kind == "longrope" else None)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
        assert ours_factor == pytest.approx(their_factor, rel=1e-6)
    cos, sin = cos_sin_caches(256, HEAD_DIM, theta, scaling)
    assert cos.shape == sin.shape == (256, HEAD_DIM // 2)


def test_longrope_uses_the_long_factors_only_past_the_original_window() -> None:
    config = transformers.LlamaConfig(**BASE, rope_parameters={"rope_theta": 10000.0, **CASES["longrope"]})
    theta, scaling = rope_settings(config.to_dict(), "full_attention")
    short, _ = inverse_frequencies(HEAD_DIM, theta, scaling, 64)
    long, _ = inverse_frequencies(HEAD_DIM, theta, scaling, 65)
    assert not np.allclose(short, long)


def test_an_unknown_rope_type_is_refused_with_the_supported_list() -> None:
    with pytest.raises(CheckpointError) as error:
        inverse_frequencies(HEAD_DIM, 10000.0, {"rope_type": "mrope", "factor": 2.0})
    assert str(error.value) == (
        f"rope scaling type 'mrope' is not supported (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
    )


def test_a_rope_scaling_missing_its_parameters_is_named() -> None:
    with pytest.raises(CheckpointError, match="rope scaling 'longrope' is missing or has a bad"):
        inverse_frequencies(HEAD_DIM, 10000.0, {"rope_type": "longrope", "factor": 2.0})
