"""The error a checkpoint that cannot be exported raises.

It lives apart from ``clika_export.checkpoint`` (which needs NumPy) because the
file readers that raise it also serve ``clika pull``, which runs where only the
standard library is installed.
"""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint that cannot be exported: the message names the problem."""
