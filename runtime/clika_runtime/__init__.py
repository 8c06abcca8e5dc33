"""clika_runtime: run exported language models offline on CPUs with ONNX Runtime."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Tensor", "__version__"]


def __getattr__(name: str) -> Any:
    # Importing the package stays free of NumPy: the store and the fetch code read no arrays.
    if name == "Tensor":
        from clika_runtime.tensor import Tensor

        return Tensor
    raise AttributeError(f"module 'clika_runtime' has no attribute {name!r}")
