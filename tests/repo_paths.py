"""Where the repository's own files are, for tests at any depth under ``tests/``."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
EXAMPLES = REPO / "examples"
# Chat templates written for the tests (thinking and tool-call markups of real families).
TEMPLATES = TESTS / "templates"
