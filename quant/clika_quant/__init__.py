"""clika_quant: int4 / int8 weight passes over a float graph, GGUF transcoding, quality measurement."""

from clika_quant.options import QuantError, QuantOptions
from clika_quant.quantize import quantize_model, quantize_proto

__all__ = ["QuantError", "QuantOptions", "quantize_model", "quantize_proto"]
