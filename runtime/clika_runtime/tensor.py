"""``clika_runtime.Tensor``: the array type media arguments take.

Images, audio and video frames cross the public API as tensors: a NumPy array,
anything NumPy can read through ``__array__`` (a CPU torch tensor, an array
from an imaging library), or a ``Tensor`` wrapping one. ``Tensor`` itself is a
thin, read-only view that records where a value came from, so the checks in
``clika_runtime.media.arguments`` can name the argument a bad value arrived in.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Tensor:
    """An n-dimensional array handed to the runtime (read-only once wrapped)."""

    __slots__ = ("_array",)

    def __init__(self, data: Any) -> None:
        array = data.numpy() if isinstance(data, Tensor) else _as_array(data)
        array = array.view()
        array.flags.writeable = False
        self._array = array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._array.shape)

    @property
    def dtype(self) -> np.dtype:
        return self._array.dtype

    @property
    def ndim(self) -> int:
        return self._array.ndim

    def numpy(self) -> np.ndarray:
        """The values as a (read-only) NumPy array; no copy."""
        return self._array

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if dtype is None or np.dtype(dtype) == self._array.dtype:
            return self._array.copy() if copy else self._array
        return self._array.astype(dtype)

    def __repr__(self) -> str:
        return f"Tensor(shape={list(self.shape)}, dtype={self.dtype})"


def _as_array(data: Any) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return data
    if hasattr(data, "detach") and hasattr(data, "cpu"):
        data = data.detach().cpu()  # a torch tensor: NumPy reads its CPU copy
    try:
        array = np.asarray(data)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read a {type(data).__name__} as a tensor: {exc}") from None
    if array.dtype == object:
        raise TypeError(f"cannot read a {type(data).__name__} as a tensor of numbers")
    return array
