"""Speculative decoding: the drafters (prompt lookup, an assistant model) and the drafting policy."""
