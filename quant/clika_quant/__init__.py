"""clika_quant: int4 / int8 weight passes over a float graph, and quality measurement."""
