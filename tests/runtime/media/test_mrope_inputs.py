"""The M-RoPE step inputs: a prompt's rotary positions and their packing into one step's rows."""

from __future__ import annotations

import numpy as np
import pytest

from clika_runtime.contract.step_graph import MROPE_POSITIONS, MROPE_ROWS, pack_mrope
from clika_runtime.media.mrope_positions import mrope_span


def test_an_image_sits_on_its_grid_and_the_text_after_it_continues_from_its_extent():
    # 2 text tokens, a 1 x 2 x 3 image (6 tokens at 2..7), 2 text tokens: 10 in all.
    span = mrope_span(10, np.arange(2, 8), [(1, 2, 3)])
    table = np.repeat(np.arange(10)[:, None], 3, axis=1)
    table[span.rows] = span.positions
    assert table[2:8].tolist() == [[2, 2, 2], [2, 2, 3], [2, 2, 4], [2, 3, 2], [2, 3, 3], [2, 3, 4]]
    assert table[8:].tolist() == [[5, 5, 5], [6, 6, 6]]  # 2 + max(2, 3)
    assert span.delta == -3 and span.prompt_len == 10
    assert span.rows.tolist() == list(range(3, 10))  # the image's first token sits at its own index


def test_a_step_packs_each_rows_positions_at_its_offset_and_the_reply_by_delta():
    span = mrope_span(10, np.arange(2, 8), [(1, 2, 3)])
    # A text row (2 tokens), then the image row's chunk 6..9 and its first reply token at 10.
    feeds = pack_mrope([(None, 5, 2), (span, 6, 5)])
    assert feeds[MROPE_ROWS].tolist() == [2, 3, 4, 5, 6]
    assert feeds[MROPE_POSITIONS].tolist() == [[2, 3, 3], [2, 3, 4], [5, 5, 5], [6, 6, 6], [7, 7, 7]]
    empty = pack_mrope([(None, 0, 4)])
    assert empty[MROPE_ROWS].shape == (0,) and empty[MROPE_POSITIONS].shape == (0, 3)


def test_media_that_disagree_with_their_grids_are_refused():
    with pytest.raises(ValueError, match="grids take 6 prompt tokens, the prompt holds 5"):
        mrope_span(10, np.arange(2, 7), [(1, 2, 3)])
    with pytest.raises(ValueError, match="not consecutive"):
        mrope_span(10, np.array([1, 2, 3, 5, 6, 7]), [(1, 2, 3)])
