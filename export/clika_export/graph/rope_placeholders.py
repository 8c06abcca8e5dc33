"""The manifest entry of one rope table the step graph holds as a placeholder.

The step graph stores each cos/sin table as an empty ``[0, rotary_dim / 2]``
initializer; the manifest's ``rope_tables`` says what the runtime computes it
from (``clika_runtime.contract.rope_tables``). Always, not by size: computing gemma-3-270m's two
ropes at 32,768 positions took 0.1-0.3 s and left opening its folder within
the noise of stored tables (3.40 s against 3.05 s, and 5.10 against 5.14 s, on
a loaded machine), while storing them costs 1-18% of a folder's bytes and
grows with the context window; one layout
for every new folder is one path to test. (At the exporter's largest window,
2^20 positions, one 128-frequency rope takes about 6 s to compute on a loaded
2-core machine: 1 GB that would otherwise be read from disk.) The entry is checked by the same validation the runtime applies
to a manifest, and its frequencies computed, so an export never writes tables
its runtime would refuse.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from clika_export.checkpoint import CheckpointError
from clika_export.graph.decoder_spec import DecoderSpec
from clika_export.graph.rope import inverse_frequencies
from clika_runtime.contract.rope_tables import RopeTable, RopeTableError, rope_tables_from_json


def rope_table(
    prefix: str, theta: float, scaling: dict[str, Any] | None, rotary_dim: int, spec: DecoderSpec
) -> RopeTable:
    """The table pair ``{prefix}.cos_cache`` / ``{prefix}.sin_cache`` over the spec's context window."""
    table = RopeTable(
        cos=f"{prefix}.cos_cache",
        sin=f"{prefix}.sin_cache",
        positions=spec.context_window,
        rotary_dim=rotary_dim,
        theta=float(theta),
        scaling=dict(scaling) if scaling else None,
    )
    try:
        (checked,) = rope_tables_from_json(
            [dataclasses.asdict(table)], context_window=spec.context_window, head_dim=spec.arch.head_dim
        )
    except RopeTableError as exc:
        raise CheckpointError(f"the checkpoint's rope cannot be computed at load: {exc}") from None
    inverse_frequencies(rotary_dim, theta, checked.scaling, spec.context_window)  # computable, or named
    return checked
