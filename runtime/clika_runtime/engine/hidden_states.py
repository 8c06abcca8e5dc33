"""Every token's final hidden state for a batch of token-id rows: the step graph's ``hidden_states``.

Embedding runs the model's own step graph session (ONNX Runtime runs
concurrent calls on one session safely), not a second one: a second session
holds its own copy of the prepacked weights. Each call has its own IO binding
and its own scratch KV, sized to the batch (every row a prefill from position
0), so it never reads or writes the engine's cache; the engine's steps go on
beside it. The lm_head runs on one token a row (``logits_index``), the least
the graph takes.

Both graph kinds are fed: the continuous graph (grid maps, either layout;
float or int8 cache) and the paged one (a block pool per layer, each row on
consecutive blocks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnxruntime as ort

from clika_runtime.contract.manifest import Architecture, GraphSpec
from clika_runtime.contract.paged_step_graph import PagedRow, pack_paged_step
from clika_runtime.contract.step_graph import (
    HIDDEN_STATES,
    LOGITS_INDEX,
    GridLayout,
    StepRow,
    grid_layout,
    pack_step,
    text_only_media,
)


class HiddenStateRunner:
    """Runs rows of token ids through a step graph session; returns each row's hidden states ``[len, H]``."""

    def __init__(
        self, session: ort.InferenceSession, graph: GraphSpec, arch: Architecture, context_window: int
    ) -> None:
        if HIDDEN_STATES not in graph.outputs:
            raise ValueError(f"{graph.file} has no {HIDDEN_STATES} output")
        self.session = session
        self.graph = graph
        self.arch = arch
        self.context_window = context_window
        self.paged = graph.kv.block_size is not None
        self._block = int(graph.kv.block_size or 1)
        self._layout = grid_layout(value.name for value in session.get_inputs()) or GridLayout.CELLS
        # A vision folder's graph takes media (and M-RoPE) inputs: text rows feed them empty.
        self._text_only = text_only_media(session.get_inputs())

    def run(self, rows: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """One ORT call over ``rows`` (each non-empty, within the context window)."""
        if not rows or any(len(row) == 0 for row in rows):
            raise ValueError("every row needs at least one token")
        pools = self._pools(len(rows), [len(row) for row in rows])
        hidden = self._call(self._feeds([(0, row) for row in rows]), pools, sum(len(r) for r in rows))
        bounds = np.cumsum([0, *(len(row) for row in rows)])
        return [hidden[bounds[i] : bounds[i + 1]] for i in range(len(rows))]

    def run_chunked(
        self, row: Sequence[int], chunk: int, should_stop: Callable[[], bool] | None = None
    ) -> np.ndarray | None:
        """One long row in calls of ``chunk`` tokens over one scratch KV (None: ``should_stop`` said so).

        Attention's scores grow with the tokens of a call times the row's length:
        chunks bound a call's memory and time the way the engine's chunked prefill does.
        """
        if not row:
            raise ValueError("every row needs at least one token")
        pools = self._pools(1, [len(row)])
        parts = []
        for start in range(0, len(row), chunk):
            if should_stop is not None and should_stop():
                return None
            piece = row[start : start + chunk]
            parts.append(self._call(self._feeds([(start, piece)], len(row)), pools, len(piece)))
        return np.concatenate(parts)

    def _call(self, feeds: dict[str, np.ndarray], pools: list, tokens: int) -> np.ndarray:
        """Run the graph once; the hidden states ``[tokens, H]`` of the packed tokens."""
        binding = self.session.io_binding()
        for name, array in {**feeds, **self._text_only}.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(array))
        kept = []  # the OrtValues the binding refers to: alive until the call returns
        kv = self.graph.kv
        for layer, (keys, values) in enumerate(pools):
            for past, present, array in (
                (kv.past_key, kv.present_key, keys),
                (kv.past_value, kv.present_value, values),
            ):
                shared = ort.OrtValue.ortvalue_from_numpy(array)  # updated in place, as in the engine
                binding.bind_ortvalue_input(past.format(layer=layer), shared)
                binding.bind_ortvalue_output(present.format(layer=layer), shared)
                kept.append(shared)
        hidden = np.empty((tokens, self.arch.hidden_size), dtype=np.float32)
        rows = len(feeds[LOGITS_INDEX])
        logits = np.empty((rows, self.arch.vocab_size), dtype=np.float32)
        for name, array in ((HIDDEN_STATES, hidden), (self.graph.logits_output, logits)):
            value = ort.OrtValue.ortvalue_from_numpy(array)
            binding.bind_ortvalue_output(name, value)
            kept.append(value)
        self.session.run_with_iobinding(binding)
        return hidden

    def _pools(self, rows: int, lengths: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Zeroed scratch KV per layer: ``[rows, kv_heads, longest, head_dim]``, or paged blocks for them all."""
        a = self.arch
        if self.paged:
            block = self._block
            shape = (a.num_kv_heads, sum(-(-n // block) for n in lengths), block, a.head_dim)
        else:
            shape = (rows, a.num_kv_heads, max(lengths), a.head_dim)
        dtype = np.dtype(self.graph.kv.dtype)
        return [(np.zeros(shape, dtype), np.zeros(shape, dtype)) for _ in range(a.num_layers)]

    def _feeds(
        self, rows: list[tuple[int, Sequence[int]]], capacity: int | None = None
    ) -> dict[str, np.ndarray]:
        """The graph's inputs for ``(past_len, new_token_ids)`` rows; row ``b`` owns slot (or blocks) ``b``."""
        if not self.paged:
            width = capacity or max(len(ids) for _, ids in rows)
            steps = [StepRow(past, list(ids)) for past, ids in rows]
            return pack_step(steps, capacity=width, context_window=self.context_window).feeds(self._layout)
        block, start, paged_rows = self._block, 0, []
        for past, ids in rows:
            blocks = -(-(capacity or past + len(ids)) // block)
            paged_rows.append(PagedRow(past, list(ids), list(range(start, start + blocks))))
            start += blocks
        return pack_paged_step(paged_rows, block_size=block, context_window=self.context_window).feeds()
