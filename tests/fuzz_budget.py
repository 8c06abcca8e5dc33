"""How many generated cases each fuzz target runs (tests/fuzz), and the count of those run."""

from __future__ import annotations

import collections
import os

from hypothesis import HealthCheck, settings

# The long run (benchmarks/fuzz/run.py) multiplies every budget by this.
SCALE = float(os.environ.get("CLIKA_FUZZ_SCALE", "1"))
CASES: collections.Counter[str] = collections.Counter()


def budget(examples: int) -> settings:
    """Hypothesis settings for a target's CI budget: ``examples`` cases (times SCALE), no deadline
    (the runtime's own bounds are what is checked), no example database (the runs are reproducible
    from the seed pytest prints)."""
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def count(target: str) -> None:
    CASES[target] += 1
