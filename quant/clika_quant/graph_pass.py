"""Rewrite the weight ops of a float step graph into quantized ones.

Consumers handled (the float graph's weight initializers and their nodes):

* ``MatMul(x, W[in, out])`` and ``Gemm(x, W[out, in], transB=1)`` (a tied
  head) -> ``MatMulNBits`` per group, plus ``blocksum(x) @ offsets`` when the
  group has offsets, plus ``Concat`` when the matrix has several groups::

      x[T,K] -> MatMulNBits ------------------------------------\\
      x[T,K] -> (Pad) -> Reshape[T,nb,bs] -> ReduceSum -> Gemm(offsets^T) -> Add -> y[T,N]

* ``Gather(W[V, H], ids)`` (the token table) -> ``GatherBlockQuantized``
  reading the same bytes as the head's MatMulNBits when the table is tied::

      ids -> GatherBlockQuantized[T,nb,bs] (+ Gather(offsets)[T,nb,1]) -> Reshape[T,H]

The replacement nodes write the float node's output name, so the rest of the
graph (and the graph's inputs and outputs) never changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from clika_quant.blocks import BlockQuantized, pack_b, pack_zero_points
from clika_quant.choose import Group
from clika_quant.onnx_ops import MS_DOMAIN, dynamic_quantize_matmul

_INIT_NAMES = {"b": "qweight", "scales": "scales", "zp": "zero_points", "offsets": "offsets"}


@dataclass
class Rewriter:
    """Collects replacement nodes and initializers for one graph."""

    graph: onnx.GraphProto
    # Keep new weights as arrays (a file writer streams them out) instead of copying them into protobufs.
    keep_arrays: bool = False
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    new_initializers: list[onnx.TensorProto] = field(default_factory=list)
    replaced: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    removed_initializers: set[str] = field(default_factory=set)
    _block_sums: dict[tuple[str, int, int], str] = field(default_factory=dict)
    _packed: dict[str, str] = field(default_factory=dict)

    def node(self, name: str) -> onnx.NodeProto:
        for node in self.graph.node:
            if node.name == name:
                return node
        raise KeyError(f"the graph has no node named {name!r}")

    def add_init(self, name: str, array: np.ndarray) -> str:
        array = np.ascontiguousarray(array)
        if self.keep_arrays:
            self.arrays[name] = array
            dtype = helper.np_dtype_to_tensor_dtype(array.dtype)
            self.new_initializers.append(onnx.TensorProto(name=name, data_type=dtype, dims=array.shape))
        else:
            self.new_initializers.append(numpy_helper.from_array(array, name))
        return name

    # -- shared storage of one quantized matrix ------------------------------------

    def packed(self, base: str, matrix: BlockQuantized, part: str) -> str:
        """The initializer holding one part ("b", "scales", "zp", "offsets") of a matrix, made once.

        A tied table's codes ("b") are shared by GatherBlockQuantized and MatMulNBits.
        """
        key = f"{base}.{part}"
        if key not in self._packed:
            if part == "b":
                array = pack_b(matrix)
            elif part == "scales":
                array = matrix.scales.astype(np.float32)
            elif part == "zp":
                zp = (
                    matrix.zero_points.astype(np.float32)
                    if matrix.float_zero_points
                    else pack_zero_points(matrix)
                )
                array = zp.reshape(-1)
            else:
                array = matrix.offsets.astype(np.float32)
            self._packed[key] = self.add_init(f"{base}.{_INIT_NAMES[part]}", array)
        return self._packed[key]

    # -- MatMul / Gemm consumers ---------------------------------------------------

    def matmul(self, node: onnx.NodeProto, groups: list[Group], base: str, levels: list[int]) -> None:
        """Replace a MatMul/Gemm by the groups' MatMulNBits (concatenated when several)."""
        x, out = node.input[0], node.output[0]
        scope = node.name.rsplit("/", 1)[0]
        nodes: list[onnx.NodeProto] = []
        outputs = []
        for i, group in enumerate(groups):
            suffix = "" if len(groups) == 1 else f".part{i}"
            target = out if len(groups) == 1 else f"{scope}/part{i}/output_0"
            nodes += self._nbits(
                x, target, group.matrix, f"{base}{suffix}", f"{scope}{suffix.replace('.', '/')}", levels[i]
            )
            outputs.append(target)
        if len(groups) > 1:
            nodes.append(helper.make_node("Concat", outputs, [out], name=f"{scope}/Concat", axis=-1))
        self.replaced[node.name] = nodes

    def _nbits(
        self, x: str, out: str, matrix: BlockQuantized, base: str, scope: str, level: int
    ) -> list[onnx.NodeProto]:
        main = out if matrix.offsets is None else f"{scope}/MatMulNBits/output_0"
        zp = self.packed(base, matrix, "zp") if matrix.zero_points is not None else ""
        inputs = [x, self.packed(base, matrix, "b"), self.packed(base, matrix, "scales"), zp]
        while not inputs[-1]:
            inputs.pop()
        nodes = [
            helper.make_node(
                "MatMulNBits",
                inputs,
                [main],
                name=f"{scope}/MatMulNBits",
                domain=MS_DOMAIN,
                K=matrix.k,
                N=matrix.n,
                bits=matrix.bits,
                block_size=matrix.block_size,
                accuracy_level=level,
            )
        ]
        if matrix.offsets is not None:
            sums, sum_nodes = self._block_sum(x, matrix.k, matrix.block_size, scope)
            correction = f"{scope}/Offsets/output_0"
            nodes += sum_nodes
            nodes.append(
                helper.make_node(
                    "Gemm",
                    [sums, self.packed(base, matrix, "offsets")],
                    [correction],
                    name=f"{scope}/Offsets",
                    transB=1,
                )
            )
            nodes.append(helper.make_node("Add", [main, correction], [out], name=f"{scope}/AddOffsets"))
        return nodes

    def _block_sum(self, x: str, k: int, block: int, scope: str) -> tuple[str, list[onnx.NodeProto]]:
        """``x[T, K]`` summed per block of ``block`` inputs -> ``[T, n_blocks]`` (shared by all users of x)."""
        key = (x, k, block)
        if key in self._block_sums:
            return self._block_sums[key], []
        n_blocks = -(-k // block)
        nodes = []
        src = x
        if n_blocks * block != k:
            pads = self.add_init(
                f"{scope}.block_sum.pads", np.array([0, 0, 0, n_blocks * block - k], np.int64)
            )
            src = f"{scope}/BlockSumPad/output_0"
            nodes.append(helper.make_node("Pad", [x, pads], [src], name=f"{scope}/BlockSumPad"))
        shape = self.add_init(f"{scope}.block_sum.shape", np.array([-1, n_blocks, block], np.int64))
        axes = self.add_init(f"{scope}.block_sum.axes", np.array([2], np.int64))
        blocked, sums = f"{scope}/BlockSumReshape/output_0", f"{scope}/BlockSum/output_0"
        nodes.append(helper.make_node("Reshape", [src, shape], [blocked], name=f"{scope}/BlockSumReshape"))
        nodes.append(
            helper.make_node("ReduceSum", [blocked, axes], [sums], name=f"{scope}/BlockSum", keepdims=0)
        )
        self._block_sums[key] = sums
        return sums, nodes

    def dqmm(self, node: onnx.NodeProto, weight_kn: np.ndarray, base: str) -> None:
        scope = node.name.rsplit("/", 1)[0]
        nodes, inits = dynamic_quantize_matmul(weight_kn, node.input[0], node.output[0], base)
        nodes[0].name = f"{scope}/DynamicQuantizeMatMul"
        for tensor in inits:
            self.add_init(tensor.name, numpy_helper.to_array(tensor))
        self.replaced[node.name] = nodes

    # -- Gather consumer (token table) ---------------------------------------------

    def gather(self, node: onnx.NodeProto, group: Group, base: str) -> None:
        """Replace ``Gather(table, ids)`` by GatherBlockQuantized on the group's bytes."""
        matrix = group.matrix
        if matrix.k % matrix.block_size:
            raise ValueError(f"table {base}: width {matrix.k} is not a multiple of block {matrix.block_size}")
        if matrix.float_zero_points:
            raise ValueError(f"table {base}: GatherBlockQuantized has no float zero points")
        ids, out = node.input[1], node.output[0]
        scope = node.name.rsplit("/", 1)[0]
        v, nb = matrix.n, matrix.n_blocks
        scales3 = self.add_init(f"{base}.gather_scales", matrix.scales.reshape(v, nb, 1))
        inputs = [self.packed(base, matrix, "b"), ids, scales3]
        if matrix.zero_points is not None:
            inputs.append(
                self.add_init(f"{base}.gather_zero_points", matrix.integer_zero_points().reshape(v, nb, 1))
            )
        gathered = f"{scope}/GatherBlockQuantized/output_0"
        nodes = [
            helper.make_node(
                "GatherBlockQuantized",
                inputs,
                [gathered],
                name=f"{scope}/GatherBlockQuantized",
                domain=MS_DOMAIN,
                gather_axis=0,
                quantize_axis=2,
                block_size=matrix.block_size,
                bits=matrix.bits,
            )
        ]
        if matrix.offsets is not None:
            offsets3 = self.add_init(f"{base}.gather_offsets", matrix.offsets.reshape(v, nb, 1))
            picked, summed = f"{scope}/GatherOffsets/output_0", f"{scope}/AddOffsets/output_0"
            nodes.append(
                helper.make_node("Gather", [offsets3, ids], [picked], name=f"{scope}/GatherOffsets", axis=0)
            )
            nodes.append(helper.make_node("Add", [gathered, picked], [summed], name=f"{scope}/AddOffsets"))
            gathered = summed
        shape = self.add_init(f"{base}.gather_shape", np.array([-1, matrix.k], np.int64))
        nodes.append(helper.make_node("Reshape", [gathered, shape], [out], name=f"{scope}/Reshape"))
        self.replaced[node.name] = nodes

    # -- applying ------------------------------------------------------------------

    def apply(self) -> None:
        """Swap replaced nodes in place (keeping topological order) and the initializers."""
        new_nodes = []
        for node in self.graph.node:
            new_nodes.extend(self.replaced.get(node.name, [node]))
        del self.graph.node[:]
        self.graph.node.extend(new_nodes)
        kept = [t for t in self.graph.initializer if t.name not in self.removed_initializers]
        del self.graph.initializer[:]
        self.graph.initializer.extend(kept + self.new_initializers)


def consumers(graph: onnx.GraphProto, tensor: str) -> list[onnx.NodeProto]:
    return [n for n in graph.node if tensor in n.input]


def check_gemm_is_plain(node: onnx.NodeProto) -> None:
    """A Gemm we replace must be ``x @ W^T``: transB=1, no C, alpha=beta=1, transA=0."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if (
        attrs.get("transB", 0) != 1
        or attrs.get("transA", 0)
        or attrs.get("alpha", 1.0) != 1.0
        or len(node.input) > 2
    ):
        raise ValueError(f"node {node.name}: only Gemm(x, W, transB=1) without bias can be quantized")


LoadWeight = Callable[[str], np.ndarray]
