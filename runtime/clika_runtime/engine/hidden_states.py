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

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from clika_runtime.manifest import Architecture, GraphSpec
from clika_runtime.paged_step_graph import PagedRow, pack_paged_step
from clika_runtime.step_graph import HIDDEN_STATES, GridLayout, StepRow, grid_layout, pack_step


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
        self._layout = grid_layout(value.name for value in session.get_inputs()) or GridLayout.CELLS

    def kv_bytes_per_token(self) -> int:
        """The scratch KV one token of a call holds (all layers, keys and values)."""
        a = self.arch
        return 2 * a.num_layers * a.num_kv_heads * a.head_dim * np.dtype(self.graph.kv.dtype).itemsize

    def run(self, rows: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """One ORT call over ``rows`` (each non-empty, within the context window)."""
        if not rows or any(len(row) == 0 for row in rows):
            raise ValueError("every row needs at least one token")
        feeds, pools = self._paged(rows) if self.paged else self._continuous(rows)
        binding = self.session.io_binding()
        for name, array in feeds.items():
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
        total = sum(len(row) for row in rows)
        hidden = np.empty((total, self.arch.hidden_size), dtype=np.float32)
        logits = np.empty((len(rows), self.arch.vocab_size), dtype=np.float32)
        for name, array in ((HIDDEN_STATES, hidden), (self.graph.logits_output, logits)):
            value = ort.OrtValue.ortvalue_from_numpy(array)
            binding.bind_ortvalue_output(name, value)
            kept.append(value)
        self.session.run_with_iobinding(binding)
        bounds = np.cumsum([0, *(len(row) for row in rows)])
        return [hidden[bounds[i] : bounds[i + 1]] for i in range(len(rows))]

    def _continuous(self, rows: Sequence[Sequence[int]]) -> tuple[dict[str, np.ndarray], list]:
        width = max(len(row) for row in rows)
        packed = pack_step(
            [StepRow(0, list(row)) for row in rows], capacity=width, context_window=self.context_window
        )
        a = self.arch
        shape = (len(rows), a.num_kv_heads, width, a.head_dim)
        dtype = np.dtype(self.graph.kv.dtype)
        pools = [(np.zeros(shape, dtype), np.zeros(shape, dtype)) for _ in range(a.num_layers)]
        return packed.feeds(self._layout), pools

    def _paged(self, rows: Sequence[Sequence[int]]) -> tuple[dict[str, np.ndarray], list]:
        block = int(self.graph.kv.block_size or 1)
        tables, start = [], 0
        for row in rows:
            blocks = -(-len(row) // block)
            tables.append(list(range(start, start + blocks)))
            start += blocks
        packed = pack_paged_step(
            [PagedRow(0, list(row), table) for row, table in zip(rows, tables, strict=True)],
            block_size=block,
            context_window=self.context_window,
        )
        a = self.arch
        shape = (a.num_kv_heads, start, block, a.head_dim)
        dtype = np.dtype(self.graph.kv.dtype)
        pools = [(np.zeros(shape, dtype), np.zeros(shape, dtype)) for _ in range(a.num_layers)]
        return packed.feeds(), pools
