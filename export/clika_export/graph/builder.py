"""A small ONNX graph builder: hierarchical node names, weights streamed to disk.

``GraphBuilder`` keeps the node list, names each node after the scope it was
made in (``/model/layers.3/attn/qkv/MatMul``) and its outputs after the node
(``/model/layers.3/attn/qkv/MatMul/output_0``), so a graph reads like the
model's module tree in Netron and in profiles.

Weights never stay in memory: ``weight()`` appends the array's bytes to the one
external data file (aligned, so ORT can map them) and keeps only a reference,
which keeps the peak memory of an export near one tensor rather than the model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Offsets of external tensors are aligned to a page so ORT may memory-map them.
_DATA_ALIGNMENT = 4096
_WRITE_BLOCK = 16 << 20

ONNX_OPSET = 21
MS_DOMAIN = "com.microsoft"
MS_OPSET = 1

_DTYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int8): TensorProto.INT8,
}


def onnx_dtype(dtype: Any) -> int:
    """The ONNX element type of a NumPy dtype."""
    try:
        return _DTYPES[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"no ONNX element type for dtype {np.dtype(dtype)}") from None


class ExternalData:
    """Appends tensors to one external data file and returns references to them."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._offset = 0

    def add(self, name: str, array: np.ndarray) -> TensorProto:
        """Append ``array`` (any strides: a transposed view is written row block by row block)."""
        pad = -self._offset % _DATA_ALIGNMENT
        if pad:
            self._file.write(b"\0" * pad)
            self._offset += pad
        tensor = TensorProto(name=name, data_type=onnx_dtype(array.dtype), dims=array.shape)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.path.name), ("offset", self._offset), ("length", array.nbytes)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        self._write(array)
        self._offset += array.nbytes
        return tensor

    def _write(self, array: np.ndarray) -> None:
        # Blocks of about _WRITE_BLOCK bytes: a strided view never becomes one full-size copy.
        if array.ndim == 0 or array.flags.c_contiguous:
            self._file.write(np.ascontiguousarray(array).data)
            return
        rows = max(1, _WRITE_BLOCK // max(1, array[0].nbytes))
        for start in range(0, array.shape[0], rows):
            self._file.write(np.ascontiguousarray(array[start : start + rows]).data)

    @property
    def size(self) -> int:
        return self._offset

    def close(self) -> None:
        self._file.close()


class GraphBuilder:
    """Collects nodes, inputs, outputs and initializers of one ONNX graph."""

    def __init__(self, name: str, data: ExternalData) -> None:
        self.name = name
        self.data = data
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.initializers: list[TensorProto] = []
        self._scope: list[str] = []
        self._node_names: set[str] = set()
        self._tensor_names: set[str] = set()

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Nodes made inside are named ``/<outer scopes>/<name>/<op>``."""
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def node_name(self, label: str) -> str:
        return "/" + "/".join([*self._scope, label])

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        label: str | None = None,
        outputs: int | Sequence[str] = 1,
        domain: str = "",
        **attrs: Any,
    ) -> Any:
        """Add one node; returns its output name (or a list when it has several).

        ``outputs`` is a count (names are derived from the node name) or explicit
        names; an empty explicit name leaves that optional output unrequested.
        """
        name = self.node_name(label or op_type)
        if name in self._node_names:
            raise ValueError(f"duplicate node name {name}")
        self._node_names.add(name)
        if isinstance(outputs, int):
            out_names = [f"{name}/output_{i}" for i in range(outputs)]
        else:
            out_names = list(outputs)
        self.nodes.append(
            helper.make_node(op_type, list(inputs), out_names, name=name, domain=domain, **attrs)
        )
        return out_names[0] if len(out_names) == 1 else out_names

    def weight(self, name: str, array: np.ndarray) -> str:
        """A large initializer written to the external data file."""
        self._claim(name)
        self.initializers.append(self.data.add(name, array))
        return name

    def constant(self, name: str, array: np.ndarray | Sequence[int] | int) -> str:
        """A small initializer stored inside the graph (shapes, axes)."""
        self._claim(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name=name))
        return name

    def input(self, name: str, dtype: Any, shape: Sequence[int | str | None]) -> str:
        self._claim(name)
        self.inputs.append(helper.make_tensor_value_info(name, onnx_dtype(dtype), list(shape)))
        return name

    def output(self, name: str, dtype: Any, shape: Sequence[int | str | None]) -> str:
        self.outputs.append(helper.make_tensor_value_info(name, onnx_dtype(dtype), list(shape)))
        return name

    def model(self, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", ONNX_OPSET), helper.make_opsetid(MS_DOMAIN, MS_OPSET)],
            producer_name="clika_export",
            doc_string=doc,
        )
        # Keep the IR version ORT releases of the last two years still read.
        model.ir_version = min(model.ir_version, 10)
        return model

    def _claim(self, name: str) -> None:
        if name in self._tensor_names:
            raise ValueError(f"duplicate tensor name {name}")
        self._tensor_names.add(name)


def save_model(model: onnx.ModelProto, path: Path) -> None:
    """Write the graph (its weights are already in the external data file)."""
    Path(path).write_bytes(model.SerializeToString())
