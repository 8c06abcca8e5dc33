"""The fuzz tier: every test here is marked ``fuzz`` and counts the generated cases it ran.

``pytest -m fuzz`` runs each target with its CI budget (``budget.py``);
``CLIKA_FUZZ_SCALE`` multiplies every budget (``benchmarks/fuzz/run.py`` sets
it for the long run). The summary line names the cases tried per target.
"""

from __future__ import annotations

import pytest
from fuzz_budget import CASES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/fuzz/" in str(item.path):
            item.add_marker(pytest.mark.fuzz)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if not CASES:
        return
    terminalreporter.write_line(f"fuzz: {sum(CASES.values())} generated cases across {len(CASES)} targets")
    for target, count in sorted(CASES.items()):
        terminalreporter.write_line(f"  {target}: {count}")
