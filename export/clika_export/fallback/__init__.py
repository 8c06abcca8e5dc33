"""Architectures no native family builds: optimum's ONNX exporter, run on a pinned toolchain."""
