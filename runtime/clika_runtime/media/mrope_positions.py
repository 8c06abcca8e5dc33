"""Qwen2-VL's M-RoPE positions of a prompt: (temporal, height, width) per token, as transformers'
``get_rope_index`` computes them.

Text tokens count on from the previous token's position in all three rows. An
image of ``t x h x w`` merged patches (in the prompt as ``t * h * w`` consecutive
image tokens, row-major) starting at position ``p`` puts its token ``(i, j, k)``
at ``(p + i, p + j, p + k)``; the text after it continues one past the largest,
at ``p + max(t, h, w)``. A video is the same with ``t`` its temporal patches
(Qwen2-VL counts them directly; Qwen2.5-VL's seconds-based steps are not this).
So after an image a token's position is its KV index plus a per-sequence
``delta`` (usually negative), which the tokens generated after the prompt keep:
the ``RopeSpan`` the step graph's ``mrope_*`` inputs are packed from.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from clika_runtime.contract.step_graph import RopeSpan


def mrope_span(
    prompt_len: int, media_positions: np.ndarray, grids: Sequence[tuple[int, int, int]]
) -> RopeSpan:
    """The rotary positions of a ``prompt_len``-token prompt whose ``media_positions`` (ascending)
    hold the images' tokens in order, image ``k`` of ``grids[k]`` = (t, h, w) merged patches."""
    counts = [t * h * w for t, h, w in grids]
    if sum(counts) != len(media_positions):
        raise ValueError(
            f"images: their grids take {sum(counts)} prompt tokens, the prompt holds {len(media_positions)}"
        )
    table = np.empty((prompt_len, 3), dtype=np.int64)
    position = 0  # the next text token's position
    done = 0  # the KV index the text before the next image starts at
    offset = 0
    for (t, h, w), count in zip(grids, counts, strict=True):
        first = int(media_positions[offset]) if count else done
        span = media_positions[offset : offset + count]
        if count and int(span[-1]) - first != count - 1:
            raise ValueError("images: an image's tokens are not consecutive in the prompt")
        table[done:first] = (position + np.arange(first - done))[:, None]
        position += first - done
        grid = np.stack(np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij"), axis=-1)
        table[first : first + count] = grid.reshape(-1, 3) + position
        position += max(t, h, w)  # one past the media's largest position in any row
        done, offset = first + count, offset + count
    table[done:] = (position + np.arange(prompt_len - done))[:, None]
    delta = position - done
    index = np.arange(prompt_len, dtype=np.int64)
    off = np.flatnonzero((table != index[:, None]).any(axis=1))
    return RopeSpan(off.astype(np.int64), np.ascontiguousarray(table[off]), prompt_len, int(delta))
