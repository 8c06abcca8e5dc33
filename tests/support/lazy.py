"""Heavy modules imported on first use, not when a test module is collected.

torch and transformers take seconds to import; a helper module that imports
them at its top makes every test file that imports the helper pay for them at
collection, even when the tests picked (``-k``, one file, ``-m "not slow"``)
never build a checkpoint.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module ``name``: the first attribute read imports it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)


torch: Any = LazyModule("torch")
transformers: Any = LazyModule("transformers")
