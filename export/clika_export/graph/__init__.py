"""The ONNX graph builder: the step graph of a decoder-only language model."""
