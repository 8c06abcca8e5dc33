"""Read and write an ONNX graph whose weights live in one external data file.

Weights are read through memory maps (a float graph of a 1.5B model is 6 GB;
it never has to sit in memory whole) and written back aligned to a page so ORT
can map them. The new files are written beside the old ones and renamed over
them at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_ALIGNMENT = 4096
# Initializers smaller than this stay inside the .onnx file (shapes, axes).
_INLINE_BYTES = 1024


class ExternalWeights:
    """Loads initializers of a graph read with ``load_external_data=False``."""

    def __init__(self, model: onnx.ModelProto, folder: Path) -> None:
        self.folder = Path(folder)
        self.tensors = {t.name: t for t in model.graph.initializer}

    def __call__(self, name: str) -> np.ndarray:
        tensor = self.tensors[name]
        if tensor.data_location != TensorProto.EXTERNAL:
            return numpy_helper.to_array(tensor)
        info = {e.key: e.value for e in tensor.external_data}
        dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
        shape = tuple(tensor.dims)
        count = int(np.prod(shape, dtype=np.int64))
        return np.memmap(
            self.folder / info["location"],
            dtype=dtype,
            mode="r",
            offset=int(info.get("offset", 0)),
            shape=(count,),
        ).reshape(shape)


def load_graph(model_path: Path) -> tuple[onnx.ModelProto, ExternalWeights]:
    model = onnx.load(str(model_path), load_external_data=False)
    return model, ExternalWeights(model, Path(model_path).parent)


def save_graph(
    model: onnx.ModelProto,
    model_path: Path,
    data_name: str,
    load: ExternalWeights,
    arrays: dict[str, np.ndarray] | None = None,
) -> None:
    """Write ``model`` to ``model_path`` with every large initializer in ``data_name``.

    An initializer's value comes from ``arrays`` (new weights) when named there,
    else from the old data file, else from the graph itself.
    """
    arrays = arrays or {}
    model_path = Path(model_path)
    folder = model_path.parent
    tmp_data = folder / f".{data_name}.writing"
    tmp_model = folder / f".{model_path.name}.writing"
    # Arrays that are views of one buffer (an alias: the same bytes under another shape) are
    # written once and referenced twice.
    written: dict[tuple[int, int], int] = {}
    with open(tmp_data, "wb") as fh:
        offset = 0
        tensors = []
        for tensor in model.graph.initializer:
            array = arrays.get(tensor.name)
            if array is None and tensor.data_location == TensorProto.EXTERNAL:
                array = load(tensor.name)
            if array is None and len(tensor.raw_data) + _typed_size(tensor) < _INLINE_BYTES:
                tensors.append(tensor)
                continue
            array = np.ascontiguousarray(array if array is not None else numpy_helper.to_array(tensor))
            if array.nbytes < _INLINE_BYTES:
                tensors.append(numpy_helper.from_array(array, tensor.name))
                continue
            key = (array.__array_interface__["data"][0], array.nbytes)
            if tensor.name in arrays and key in written:
                tensors.append(_external_ref(tensor, data_name, written[key], array.nbytes))
                continue
            pad = -offset % _ALIGNMENT
            fh.write(b"\0" * pad)
            offset += pad
            fh.write(array.tobytes())
            tensors.append(_external_ref(tensor, data_name, offset, array.nbytes))
            if tensor.name in arrays:
                written[key] = offset
            offset += array.nbytes
    del model.graph.initializer[:]
    model.graph.initializer.extend(tensors)
    tmp_model.write_bytes(model.SerializeToString())
    os.replace(tmp_data, folder / data_name)
    os.replace(tmp_model, model_path)


def _typed_size(tensor: TensorProto) -> int:
    return 8 * (len(tensor.float_data) + len(tensor.int64_data) + len(tensor.int32_data))


def _external_ref(tensor: TensorProto, location: str, offset: int, length: int) -> TensorProto:
    ref = TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    ref.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = ref.external_data.add()
        entry.key, entry.value = key, str(value)
    return ref
