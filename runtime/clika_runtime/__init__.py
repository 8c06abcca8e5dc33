"""clika_runtime: run exported language models offline on CPUs with ONNX Runtime."""

__version__ = "0.1.0"
