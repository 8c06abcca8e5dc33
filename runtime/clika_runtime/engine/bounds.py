"""Checks of the sizes an engine part is built with."""

from __future__ import annotations


def require_at_least(minimum: int, **values: int) -> None:
    """Raise ValueError for the first of ``values`` (in the order given) below ``minimum``."""
    for name, value in values.items():
        if value < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {value}")
