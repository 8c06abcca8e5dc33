"""StepAttention against its float64 reference and the GroupQueryAttention step it replaces,
on every x86 ISA (each in its own process), bit for bit the scalar path's."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from attention_cases import (
    LAYOUTS,
    STEPS,
    Layout,
    Step,
    feeds,
    gqa_model,
    op_feeds,
    reference,
    session,
    step_attention_model,
)
from kernel_cases import forced_isa_fixture, require_library, run_under_isa

RUNNER = Path(__file__).resolve().parents[1] / "attention_isa_runner.py"
CASES = [(layout, step) for layout in LAYOUTS for step in STEPS]
# Float32 sums over a head and up to 103 keys, and e^x to 2e-7: measured up to 2e-6
# of the output's scale (tanh's soft-cap the largest).
BOUND = 1e-5


def written_rows(f: dict[str, np.ndarray]) -> list[tuple[int, int]]:
    """(row, cached tokens after the step) of each active row."""
    return [
        (r, int(k) + 1) for r, (q, k) in enumerate(zip(f["query_seqlens"], f["seqlens_k"], strict=True)) if q
    ]


def relative(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))


@functools.cache
def computed(isa: str) -> dict:
    return run_under_isa(isa, CASES, RUNNER)


isa = forced_isa_fixture(computed)


def test_every_case_matches_the_float64_reference(isa):
    for (layout, step), (out, keys, values) in zip(CASES, computed(isa)["results"], strict=True):
        f = feeds(layout, step)
        ref_out, ref_keys, ref_values = reference(layout, f)
        assert relative(out, ref_out) <= BOUND, (layout, step)
        assert relative(keys, ref_keys) <= 1e-6 and np.array_equal(values, ref_values.astype(np.float32))


def test_every_isa_gives_the_scalar_paths_bits(isa):
    if isa == "scalar":
        pytest.skip("the scalar path is the reference")
    for (layout, step), got, want in zip(
        CASES, computed(isa)["results"], computed("scalar")["results"], strict=True
    ):
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w), (isa, layout, step)


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_it_computes_what_group_query_attention_computed(layout: Layout) -> None:
    require_library()
    ours, theirs = session(step_attention_model(layout)), session(gqa_model(layout))
    for step in STEPS:
        f = feeds(layout, step)
        mine, gqa = ours.run(None, op_feeds(f)), theirs.run(None, f)
        assert relative(mine[0], gqa[0]) <= BOUND
        for r, length in written_rows(f):  # GQA's present holds the rows it wrote and keeps
            for m, g in zip(mine[1:], gqa[1:], strict=True):
                assert np.max(np.abs(m[r, :, :length] - g[r, :, :length])) <= 1e-5


def test_a_row_alone_equals_that_row_in_any_batch() -> None:
    require_library()
    layout, batch = Layout(), Step((1,) * 8, (40, 3, 17, 0, 63, 16, 31, 5))
    run = session(step_attention_model(layout))
    together = run.run(None, op_feeds(feeds(layout, batch)))[0]
    f = op_feeds(feeds(layout, batch))
    for row in range(8):
        alone = {**f, "qkv": f["qkv"][row : row + 1], "token_cell": np.array([[0, 0]], np.int64)}
        for name in ("query_seqlens", "seqlens_k", "past_key", "past_value"):
            alone[name] = f[name][row : row + 1]
        assert np.array_equal(run.run(None, alone)[0][0], together[row])


def test_bound_caches_are_written_in_place_and_only_at_the_new_positions() -> None:
    require_library()
    layout, step = Layout(), Step((5, 1, 0, 3), (0, 17, 9, 40))
    f = op_feeds(feeds(layout, step))
    run = session(step_attention_model(layout))
    keys, values = f["past_key"].copy(), f["past_value"].copy()
    key_value, value_value = ort.OrtValue.ortvalue_from_numpy(keys), ort.OrtValue.ortvalue_from_numpy(values)
    binding = run.io_binding()
    for name in ("qkv", "token_cell", "query_seqlens", "seqlens_k", "cos", "sin"):
        binding.bind_cpu_input(name, f[name])
    binding.bind_ortvalue_input("past_key", key_value)
    binding.bind_ortvalue_input("past_value", value_value)
    binding.bind_ortvalue_output("present_key", key_value)
    binding.bind_ortvalue_output("present_value", value_value)
    binding.bind_output("out")
    run.run_with_iobinding(binding)
    _, ref_keys, ref_values = reference(layout, feeds(layout, step))
    changed = np.zeros(keys.shape[::2], bool)  # [rows, capacity]
    for (row, column), past in zip(f["token_cell"], (0, 0, 0, 0, 0, 17, 40, 40, 40), strict=True):
        changed[row, past + column] = True
    # The numpy buffers themselves hold the step's writes, nothing else moved.
    assert not np.array_equal(keys, f["past_key"])
    for r in range(keys.shape[0]):
        for position in range(keys.shape[2]):
            want = ref_values[r, :, position] if changed[r, position] else f["past_value"][r, :, position]
            assert np.array_equal(values[r, :, position], want.astype(np.float32))
    assert relative(keys, ref_keys) <= 1e-6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"seqlens_k": np.array([130, 17, 0, 42], np.int32)},
            r"row 0: position 128 is outside the cache's capacity 128",
        ),
        ({"token_cell": np.array([[7, 0]] * 9, np.int64)}, r"token 0 is in row 7 of 4"),
        (
            {"token_cell": np.array([[1, 1]] * 9, np.int64)},
            r"token 0 is column 1 of row 1, which has query_seqlens 1",
        ),
        (
            {"cos": np.zeros((2048, 40), np.float32)},
            r"cos_cache has 40 columns; a head of 64 rotates at most 32",
        ),
        ({"qkv": np.zeros((9, 100), np.float32)}, r"qkv has shape \[9, 100\]"),
    ],
)
def test_bad_inputs_are_refused_by_name(change: dict, message: str) -> None:
    require_library()
    layout = Layout()
    f = {**op_feeds(feeds(layout, Step((5, 1, 0, 3), (0, 17, 9, 40)))), **change}
    if "cos" in change:
        f["sin"] = change["cos"]
    with pytest.raises(Exception, match=message):
        session(step_attention_model(layout, shapeless=True)).run(None, f)
