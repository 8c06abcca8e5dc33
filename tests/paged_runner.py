"""A paged step graph run directly over its KV pools, for tests that compare it with other graphs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_session, session_options
from clika_runtime.contract.paged_step_graph import PagedRow, pack_paged_step


class PagedRunner:
    """Runs a paged graph over pools of ``num_blocks`` blocks bound in place; tables grow from a shuffled free list."""

    def __init__(
        self, model: Path, manifest: Manifest, block_size: int, num_blocks: int, seed: int = 0
    ) -> None:
        arch = manifest.architecture
        self.session = open_session(model, session_options(1), manifest.rope_tables)
        self.block_size = block_size
        shape = (arch.num_kv_heads, num_blocks, block_size, arch.head_dim)
        self.pools = [
            (np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for _ in range(arch.num_layers)
        ]
        self.binding = self.session.io_binding()
        self.binding.bind_output("logits")
        self._values = []
        for layer, (key, value) in enumerate(self.pools):
            for kind, array in (("key", key), ("value", value)):
                shared = ort.OrtValue.ortvalue_from_numpy(array)
                self.binding.bind_ortvalue_input(f"past_{kind}.{layer}", shared)
                self.binding.bind_ortvalue_output(f"present_{kind}.{layer}", shared)
                self._values.append(shared)
        self.free = [int(b) for b in np.random.default_rng(seed).permutation(num_blocks)]
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def step(self, rows: list[tuple[int, list[int], bool]]) -> dict[int, np.ndarray]:
        """``(past_len, new tokens, want all logits)`` per sequence index; idle rows (no tokens) are left out."""
        active = [(b, row) for b, row in enumerate(rows) if row[1]]
        paged = []
        for b, (past, new, want_all) in active:
            table = self.tables.setdefault(b, [])
            while len(table) * self.block_size < past + len(new):
                table.append(self.free.pop())
            paged.append(PagedRow(past, new, list(table), want_all))
            self.lengths[b] = past + len(new)
        packed = pack_paged_step(paged, block_size=self.block_size)
        for name, array in packed.feeds().items():
            self.binding.bind_cpu_input(name, array)
        self.binding.bind_output("logits")
        self.session.run_with_iobinding(self.binding)
        logits = self.binding.get_outputs()[0].numpy()
        return {b: logits[s] for (b, _), s in zip(active, packed.logits_rows, strict=True)}
