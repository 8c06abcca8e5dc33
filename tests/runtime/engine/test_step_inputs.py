"""The decode fast path packs exactly what the general ``pack_step`` packs."""

from __future__ import annotations

import numpy as np
import pytest

from clika_runtime.contract.step_graph import (
    STEP_INPUTS,
    FlatGridFeeds,
    GridLayout,
    StepRow,
    grid_layout,
    pack_step,
)
from clika_runtime.engine.decode_packer import DecodePacker


def general(num_rows, slots, pasts, tokens, **limits):
    rows = [StepRow(0, ())] * num_rows
    for slot, past, token in zip(slots, pasts, tokens, strict=True):
        rows[slot] = StepRow(past, (token,))
    return pack_step(rows, **limits).feeds()


@pytest.mark.parametrize("seed", range(6))
def test_decode_packer_equals_pack_step(seed):
    rng = np.random.default_rng(seed)
    packer = DecodePacker()
    for _ in range(5):  # layouts change and repeat: the cached layout must follow
        num_rows = int(rng.integers(1, 9))
        slots = sorted(rng.choice(num_rows, size=int(rng.integers(1, num_rows + 1)), replace=False).tolist())
        pasts = rng.integers(0, 100, size=len(slots)).tolist()
        tokens = rng.integers(0, 1000, size=len(slots)).tolist()
        for _ in range(2):
            got = packer.pack(num_rows, slots, pasts, tokens, capacity=128, context_window=120)
            want = general(num_rows, slots, pasts, tokens, capacity=128, context_window=120)
            assert got is not None and set(got) == set(STEP_INPUTS)
            for name in STEP_INPUTS:
                assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_decode_packer_leaves_limit_errors_to_pack_step():
    packer = DecodePacker()
    assert packer.pack(2, [0], [16], [5], capacity=16) is None  # past + 1 > capacity
    with pytest.raises(ValueError, match="capacity"):
        general(2, [0], [16], [5], capacity=16)
    assert packer.pack(1, [0], [9], [5], context_window=9) is None
    with pytest.raises(ValueError, match="context window"):
        general(1, [0], [9], [5], context_window=9)
    assert packer.pack(1, [0], [14], [5], capacity=16, context_window=16) is not None
    assert packer.pack(4, [2, 1], [3, 3], [5, 6]) is None  # rows out of slot order: the general path


def test_decode_layout_arrays_are_shared_read_only():
    packer = DecodePacker()
    first = packer.pack(4, [1, 3], [5, 6], [7, 8])
    second = packer.pack(4, [1, 3], [6, 7], [9, 10])
    for name in ("grid_index", "token_cell", "query_seqlens", "logits_index"):
        assert first[name] is second[name] and not first[name].flags.writeable
    assert second["input_ids"].tolist() == [9, 10] and second["seqlens_k"].tolist() == [0, 6, 0, 7]
    assert second["grid_index"].tolist() == [[0], [0], [0], [1]]
    assert second["token_cell"].tolist() == [[1, 0], [3, 0]]


# -- the flat layout of graphs exported before token_cell --------------------------


def test_grid_layout_is_told_by_the_input_names():
    assert grid_layout([*STEP_INPUTS, "past_key.0"]) is GridLayout.CELLS
    flat = ["token_index" if n == "token_cell" else n for n in STEP_INPUTS]
    assert grid_layout(flat) is GridLayout.FLAT
    assert grid_layout(["input_ids", "position_ids", "token_index", "logits_index"]) is None  # paged
    with pytest.raises(ValueError, match="neither token_cell nor token_index"):
        grid_layout(["input_ids", "grid_index", "logits_index"])


def test_flat_feeds_of_a_mixed_step():
    # slot 0: chunk of 3 after 4 cached; slot 1 idle; slot 2 decode; slot 3 prefill of 2 (S = 3).
    packed = pack_step([(4, [10, 11, 12], True), (9, [], False), (6, [13], False), (0, [14, 15], False)])
    flat = packed.feeds(GridLayout.FLAT)
    assert set(flat) == set(STEP_INPUTS) - {"token_cell"} | {"token_index"}
    assert flat["grid_index"].tolist() == [0, 1, 2, 0, 0, 0, 3, 3, 3, 4, 5, 5]
    assert flat["token_index"].tolist() == [0, 1, 2, 6, 9, 10]
    assert flat["token_index"].dtype == np.int64 and flat["grid_index"].dtype == np.int64
    cells = packed.feeds()
    for name in ("input_ids", "query_seqlens", "seqlens_k", "total_sequence_length", "logits_index"):
        assert flat[name] is cells[name]


def test_flat_decode_feeds_stay_shared_read_only():
    """Converted decode layouts are handed out again as the same read-only arrays (no copy per step)."""
    packer, flat = DecodePacker(), FlatGridFeeds()
    first = flat.convert(packer.pack(4, [1, 3], [5, 6], [7, 8]))
    second = flat.convert(packer.pack(4, [1, 3], [6, 7], [9, 10]))
    for name in ("grid_index", "token_index"):
        assert first[name] is second[name] and not first[name].flags.writeable
    want = general(4, [1, 3], [6, 7], [9, 10])
    want_flat = FlatGridFeeds().convert(want)
    for name, array in second.items():
        np.testing.assert_array_equal(array, want_flat[name], err_msg=name)
    assert second["token_index"].tolist() == [1, 3] and second["grid_index"].tolist() == [0, 0, 0, 1]
    third = flat.convert(packer.pack(4, [0, 1, 3], [1, 2, 3], [4, 5, 6]))  # a new layout converts anew
    assert third["token_index"].tolist() == [0, 1, 3] and third["grid_index"].tolist() == [0, 1, 0, 2]
