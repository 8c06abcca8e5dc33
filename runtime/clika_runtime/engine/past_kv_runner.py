"""Run an engine step on a past-KV graph (optimum's exporter): the documented slower path.

Graphs that optimum builds for architectures no native family covers take one
sequence's new tokens with its whole past (``past_key_values.{layer}.key`` /
``.value``, ``[1, kv_heads, past, head_dim]``) and return the logits of every
new token and the past with the new tokens appended (``present.{layer}.*``).
That is not the step graph (no packed rows, no in-place cache), so this runner
stands in for ``executor.Executor`` behind the engine core's ``StepRunner``
seam: the KV stays in the continuous cache's slot buffers (so the scheduler,
prefix reuse and prefix copies work unchanged). A step's one-token rows run as
one call, their pasts padded to the longest and the padding masked out by
``attention_mask``; every other row (a prompt chunk, a draft) is a call of its
own. Each call copies the pasts in and writes the new positions back.

What it costs against a native graph (``benchmarks/features/optimum_fallback.py``): the
pasts copied in and out of every call, a call per prompt chunk, and attention
decomposed into plain ops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from clika_runtime.contract.past_kv_graph import ATTENTION_MASK, INPUT_IDS, POSITION_IDS
from clika_runtime.engine.executor import GraphRunner, StepTiming
from clika_runtime.engine.step_plan import ScheduledRow, StepPlan


@dataclass(eq=False, repr=False)
class PastKVRunner(GraphRunner):
    """Runs each row of a step as one call of a past-KV graph over the cache's slot buffers."""

    def __post_init__(self) -> None:
        graph, num_layers = self.graph, self.num_layers
        kv = graph.kv
        self._past = [(kv.past_key.format(layer=i), kv.past_value.format(layer=i)) for i in range(num_layers)]
        present = [
            (kv.present_key.format(layer=i), kv.present_value.format(layer=i)) for i in range(num_layers)
        ]
        self._outputs = [graph.logits_output, *(name for pair in present for name in pair)]
        self._model_s = 0.0
        self._mask = ATTENTION_MASK in graph.inputs
        self._positions = POSITION_IDS in graph.inputs

    def run(self, plan: StepPlan, before_call: Callable[[], None] | None = None) -> np.ndarray:
        """The logits of the plan's sampling positions, in ``sample_rows`` order (as the executor's)."""
        start = time.perf_counter()
        if before_call is not None:
            before_call()
        self._model_s = 0.0
        decode = [i for i, row in enumerate(plan.rows) if row.num_new == 1 and not row.draft]
        logits: dict[int, np.ndarray] = {}
        if self._mask and len(decode) > 1:  # one call for the one-token rows, pasts padded
            logits.update(zip(decode, self._run_decode_rows([plan.rows[i] for i in decode]), strict=True))
        for i, row in enumerate(plan.rows):
            if i not in logits:
                logits[i] = self._run_row(row)
        picked = [logits[i] if row.draft else logits[i][-1:] for i, row in enumerate(plan.rows) if row.sample]
        self.timing = StepTiming(host_s=time.perf_counter() - start - self._model_s, model_s=self._model_s)
        if not picked:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        return np.concatenate(picked)

    def _call(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        called = time.perf_counter()
        outputs = self.session.run(self._outputs, feeds)
        self._model_s += time.perf_counter() - called
        return outputs

    def _run_decode_rows(self, rows: list[ScheduledRow]) -> list[np.ndarray]:
        """Rows of one new token each in one call: each row's past sits left in a ``[B, kv_heads,
        longest, head_dim]`` array, its padding masked out by ``attention_mask`` (and skipped by
        positions counted from it), and its new token's KV comes back at column ``longest``."""
        keys, values = self.cache.buffers()
        pasts = [row.start for row in rows]
        longest = max(pasts)
        mask = np.zeros((len(rows), longest + 1), dtype=np.int64)
        mask[:, longest] = 1
        for b, past in enumerate(pasts):
            mask[b, :past] = 1
        feeds: dict[str, np.ndarray] = {
            INPUT_IDS: np.asarray([[row.seq.token_ids[row.start]] for row in rows], dtype=np.int64)
        }
        feeds[ATTENTION_MASK] = mask
        if self._positions:
            feeds[POSITION_IDS] = np.asarray(pasts, dtype=np.int64)[:, None]
        for layer, (key_name, value_name) in enumerate(self._past):
            for name, buffers in ((key_name, keys), (value_name, values)):
                _, heads, _, head_dim = buffers[layer].shape
                padded = np.zeros((len(rows), heads, longest, head_dim), buffers[layer].dtype)
                for b, (row, past) in enumerate(zip(rows, pasts, strict=True)):
                    padded[b, :, :past] = buffers[layer][row.slot, :, :past]
                feeds[name] = padded
        outputs = self._call(feeds)
        for layer in range(self.num_layers):
            for b, (row, past) in enumerate(zip(rows, pasts, strict=True)):
                keys[layer][row.slot, :, past] = outputs[1 + 2 * layer][b, :, longest]
                values[layer][row.slot, :, past] = outputs[2 + 2 * layer][b, :, longest]
        return [outputs[0][b] for b in range(len(rows))]

    def _run_row(self, row: ScheduledRow) -> np.ndarray:
        """One sequence's new tokens through the graph; its new KV written into its slot."""
        keys, values = self.cache.buffers()
        past, new = row.start, row.new_token_ids
        total = past + len(new)
        feeds: dict[str, np.ndarray] = {INPUT_IDS: np.asarray([new], dtype=np.int64)}
        if self._mask:
            feeds[ATTENTION_MASK] = np.ones((1, total), dtype=np.int64)
        if self._positions:
            feeds[POSITION_IDS] = np.arange(past, total, dtype=np.int64)[None]
        slot = row.slot
        for layer, (key_name, value_name) in enumerate(self._past):
            feeds[key_name] = np.ascontiguousarray(keys[layer][slot : slot + 1, :, :past])
            feeds[value_name] = np.ascontiguousarray(values[layer][slot : slot + 1, :, :past])
        outputs = self._call(feeds)
        for layer in range(self.num_layers):
            keys[layer][slot, :, past:total] = outputs[1 + 2 * layer][0, :, past:total]
            values[layer][slot, :, past:total] = outputs[2 + 2 * layer][0, :, past:total]
        return outputs[0][0]
