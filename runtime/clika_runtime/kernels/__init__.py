"""The native CPU kernels: the ``ai.clika::GgufMatMul`` op over GGUF blocks read in place.

``op`` holds the op's contract (domain, attributes, block layouts); ``library`` finds the
built library, reports the ISA it runs and registers it on session options.
"""
