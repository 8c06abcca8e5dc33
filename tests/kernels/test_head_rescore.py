"""HeadRescore against its float64 reference and the TopK .. ScatterElements chain it replaces,
on every x86 ISA (each in its own process), bit for bit the scalar path's."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from kernel_cases import forced_isa_fixture, require_library, run_under_isa
from rescore_cases import HEADS, Head, chain_model, feeds, reference, rescore_model, session

RUNNER = Path(__file__).resolve().parents[1] / "rescore_isa_runner.py"
# fp32 sums of up to 768 products (each rounded once as dequantized and once as multiplied):
# measured up to 3.1e-7 of the re-scored logits' scale.
BOUND = 1e-6


@functools.cache
def computed(isa: str) -> dict:
    return run_under_isa(isa, HEADS, RUNNER)


isa = forced_isa_fixture(computed)


def test_the_best_logits_match_float64_and_the_rest_stay_as_they_were(isa):
    for h, out in zip(HEADS, computed(isa)["results"], strict=True):
        f = feeds(h)
        for t, (ids, want) in enumerate(reference(h, f)):
            assert np.max(np.abs(out[t, ids] - want)) <= BOUND * np.max(np.abs(want)), (h, t)
            kept = np.ones(h.n, bool)
            kept[ids] = False
            assert np.array_equal(out[t, kept], f["approx"][t, kept], equal_nan=True), (h, t)


def test_every_isa_gives_the_scalar_paths_bits(isa):
    if isa == "scalar":
        pytest.skip("the scalar path is the reference")
    for h, got, want in zip(HEADS, computed(isa)["results"], computed("scalar")["results"], strict=True):
        assert np.array_equal(got, want, equal_nan=True), (isa, h)


@pytest.mark.parametrize("head", [h for h in HEADS if not h.nans], ids=str)
def test_it_computes_what_the_chain_computed(head: Head) -> None:
    """Same logits re-scored (ties at the k-th best to the lower index, as TopK gives them)."""
    require_library()
    f = feeds(head)
    ours, chain = session(rescore_model(head)).run(None, f)[0], session(chain_model(head)).run(None, f)[0]
    changed_ours, changed_chain = ours != f["approx"], chain != f["approx"]
    assert np.array_equal(changed_ours, changed_chain)
    assert np.max(np.abs(ours - chain)) <= 1e-5 * np.max(np.abs(chain))


def test_a_token_alone_equals_that_token_in_a_batch_of_8() -> None:
    require_library()
    head = HEADS[1]
    run, f = session(rescore_model(head)), feeds(head)
    together = run.run(None, f)[0]
    for t in range(head.tokens):
        alone = run.run(None, {"approx": f["approx"][t : t + 1], "x": f["x"][t : t + 1]})[0]
        assert np.array_equal(alone[0], together[t])


def test_bad_inputs_are_refused_by_name() -> None:
    require_library()
    head = HEADS[0]
    run, f = session(rescore_model(head)), feeds(head)
    with pytest.raises(Exception, match=r"HeadRescore: approx has shape \[1, 1000\] and x \[2, 288\]"):
        run.run(None, {**f, "x": np.zeros((2, head.k), np.float32)})
