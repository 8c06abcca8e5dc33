"""clika_runtime: run exported language models offline on CPUs with ONNX Runtime."""

from clika_runtime.tensor import Tensor

__version__ = "0.1.0"

__all__ = ["Tensor", "__version__"]
