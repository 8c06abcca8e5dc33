"""Rewrite the weight ops of a float step graph into quantized ones.

Consumers handled (the float graph's weight initializers and their nodes):

* ``MatMul(x, W[in, out])`` and ``Gemm(x, W[out, in], transB=1)`` (a tied
  head) -> ``MatMulNBits`` per group, plus ``blocksum(x) @ offsets`` when the
  group has offsets, plus ``Concat`` when the matrix has several groups::

      x[T,K] -> MatMulNBits -------------------------------------------\\ (C)
      x[T,K] -> MatMul(block indicator [K,nb]) -> sums[T,nb] -> Gemm(offsets^T) -> y[T,N]

* ``Gather(W[V, H], ids)`` (the token table) -> ``GatherBlockQuantized``
  reading the same bytes as the head's MatMulNBits when the table is tied::

      ids -> GatherBlockQuantized[T,nb,bs] (+ Gather(offsets)[T,nb,1]) -> Reshape[T,H]

* The output head may re-score its ``k`` best logits in fp32: int8 activations
  move every logit by ~1%, enough to swap two close candidates; the rows of the
  ``k`` best are gathered from the same bytes and multiplied exactly::

      x -> MatMulNBits -> approx[T,V] -> TopK(k) -> ids[T,k] -> GatherBlockQuantized[T,k,nb,bs]
      Reshape[T,k,H] * x[T,1,H] -> ReduceSum -> ScatterElements(approx, ids) -> logits[T,V]

The replacement nodes write the float node's output name, so the rest of the
graph (and the graph's inputs and outputs) never changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from clika_quant.choose import Group
from clika_quant.nibbles import NibbleSplit
from clika_quant.onnx_ops import MS_DOMAIN, dynamic_quantize_matmul
from clika_quant.q4_0_scan import Q4_0Scan
from clika_runtime.kernels import gguf_matmul as gguf_op
from clika_runtime.kernels.block_sums import BLOCK_SUM_FORM, block_sum_shape_names
from clika_runtime.kernels.blocks import BlockQuantized, pack_b, pack_zero_points

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
    # Matrices stored as high and low codes (``nibbles``), by base name: their rows are gathered
    # from both parts, and their high part ranks the head's candidates.
    splits: dict[str, NibbleSplit] = field(default_factory=dict)
    block_sum: str = BLOCK_SUM_FORM  # the offsets' block sums (``clika_runtime.kernels.block_sums``)

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

    def add_alias(self, name: str, source: str, shape: tuple[int, ...]) -> str:
        """``source``'s values under another shape, stored once (the data file holds one copy)."""
        if self.keep_arrays:
            return self.add_init(name, self.arrays[source].reshape(shape))
        tensor = next(t for t in self.new_initializers if t.name == source)
        return self.add_init(name, numpy_helper.to_array(tensor).reshape(shape))

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

    def matmul(
        self,
        node: onnx.NodeProto,
        groups: list[Group],
        base: str,
        levels: list[int],
        rescore_top_k: int = 0,
        scan: BlockQuantized | NibbleSplit | Q4_0Scan | None = None,
        layer_splits: list[NibbleSplit | None] | None = None,
    ) -> int:
        """Replace a MatMul/Gemm by the groups' MatMulNBits (concatenated when several).

        ``rescore_top_k``: recompute the ``k`` largest outputs of each row in fp32 from the
        group's bytes (the output head; one group of integer zero points whose width is whole
        blocks). ``scan``: a cheaper form of the same matrix that computes the approximate
        outputs instead (the group's bytes are then read only for the ``k`` rows).
        ``layer_splits``: per group, its high and low codes (``split_matmul``) or None.
        Returns the ``k`` re-scored (0 when not).
        """
        x, out = node.input[0], node.output[0]
        scope = node.name.rsplit("/", 1)[0]
        only = groups[0].matrix
        if rescore_top_k and len(groups) == 1 and not only.k % only.block_size and not only.float_zero_points:
            approx = f"{scope}/Approx/output_0"
            if scan is None:
                nodes = self._nbits(x, approx, only, base, scope, levels[0])
            elif isinstance(scan, NibbleSplit):
                nodes = self._split_scan(x, approx, scan, base, scope, levels[0])
            elif isinstance(scan, Q4_0Scan):
                precision = gguf_op.LEVEL_PRECISIONS[levels[0]]
                nodes = [
                    self._gguf_node(
                        x, approx, scan.blocks, "Q4_0", scan.k, f"{base}.scan", f"{scope}/Scan", precision
                    )
                ]
            else:
                nodes = self._nbits(x, approx, scan, f"{base}.scan", f"{scope}/Scan", levels[0])
            nodes += self._rescore(x, approx, out, only, base, scope, rescore_top_k)
            self.replaced[node.name] = nodes
            return min(rescore_top_k, only.n)
        nodes: list[onnx.NodeProto] = []
        outputs = []
        for i, group in enumerate(groups):
            suffix = "" if len(groups) == 1 else f".part{i}"
            target = out if len(groups) == 1 else f"{scope}/part{i}/output_0"
            part_base, part_scope = f"{base}{suffix}", f"{scope}{suffix.replace('.', '/')}"
            split = layer_splits[i] if layer_splits else None
            if split is not None:
                nodes += self.split_matmul(x, target, split, part_base, part_scope, levels[i])
            else:
                nodes += self._nbits(x, target, group.matrix, part_base, part_scope, levels[i])
            outputs.append(target)
        if len(groups) > 1:
            nodes.append(helper.make_node("Concat", outputs, [out], name=f"{scope}/Concat", axis=-1))
        self.replaced[node.name] = nodes
        return 0

    def gguf_matmul(
        self,
        node: onnx.NodeProto,
        parts: list[tuple[np.ndarray, str]],
        k: int,
        base: str,
        precisions: list[str],
    ) -> None:
        """Replace a MatMul/Gemm by ``ai.clika.GgufMatMul`` reading the GGUF blocks as stored
        (per part: uint8 ``[N, row_bytes]`` of one GGUF type, written page-aligned to the data
        file; several parts are named and concatenated as ``matmul`` names its groups)."""
        x, out = node.input[0], node.output[0]
        scope = node.name.rsplit("/", 1)[0]
        nodes, outputs = [], []
        for i, ((blocks, ggml_type), precision) in enumerate(zip(parts, precisions, strict=True)):
            suffix = "" if len(parts) == 1 else f".part{i}"
            target = out if len(parts) == 1 else f"{scope}/part{i}/output_0"
            part_scope = f"{scope}{suffix.replace('.', '/')}"
            nodes.append(
                self._gguf_node(x, target, blocks, ggml_type, k, f"{base}{suffix}", part_scope, precision)
            )
            outputs.append(target)
        if len(parts) > 1:
            nodes.append(helper.make_node("Concat", outputs, [out], name=f"{scope}/Concat", axis=-1))
        self.replaced[node.name] = nodes

    def _gguf_node(
        self,
        x: str,
        out: str,
        blocks: np.ndarray,
        ggml_type: str,
        k: int,
        base: str,
        scope: str,
        precision: str,
    ) -> onnx.NodeProto:
        """One ``GgufMatMul`` of x and the blocks (uint8 ``[N, row_bytes]`` of ``ggml_type``)."""
        return helper.make_node(
            gguf_op.OP_TYPE,
            [x, self.add_init(f"{base}{gguf_op.B_SUFFIX}", blocks)],
            [out],
            name=f"{scope}/{gguf_op.OP_TYPE}",
            domain=gguf_op.DOMAIN,
            ggml_type=gguf_op.GGML_TYPE_IDS[ggml_type],
            K=k,
            N=blocks.shape[0],
            precision=precision,
        )

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
            # One Gemm adds blocksum(x) @ offsets^T to the MatMulNBits output (its C input).
            sums, sum_nodes = self._block_sum(x, matrix.k, matrix.block_size, scope)
            nodes += sum_nodes
            nodes.append(
                helper.make_node(
                    "Gemm",
                    [sums, self.packed(base, matrix, "offsets"), main],
                    [out],
                    name=f"{scope}/Offsets",
                    transB=1,
                )
            )
        return nodes

    def _rescore(
        self, x: str, approx: str, out: str, matrix: BlockQuantized, base: str, scope: str, k: int
    ) -> list[onnx.NodeProto]:
        """``approx[T, N]`` with its ``k`` largest entries per row recomputed exactly from ``x[T, K]``."""
        k_init = self.add_init(f"{base}.rescore_k", np.array([min(k, matrix.n)], np.int64))
        top, ids = f"{scope}/Rescore/TopK/output_0", f"{scope}/Rescore/TopK/output_1"
        gather_nodes, gathered = self._gathered_rows(ids, matrix, base, f"{scope}/Rescore")
        nodes = [
            helper.make_node("TopK", [approx, k_init], [top, ids], name=f"{scope}/Rescore/TopK", axis=-1)
        ]
        nodes += gather_nodes
        shape = self.add_init(f"{base}.rescore_shape", np.array([0, 0, matrix.k], np.int64))
        axis1 = self.add_init(f"{base}.rescore_axis1", np.array([1], np.int64))
        axis2 = self.add_init(f"{base}.rescore_axis2", np.array([2], np.int64))
        names = {
            step: f"{scope}/Rescore/{step}/output_0" for step in ("Reshape", "Unsqueeze", "Mul", "ReduceSum")
        }
        nodes += [
            helper.make_node(
                "Reshape", [gathered, shape], [names["Reshape"]], name=f"{scope}/Rescore/Reshape"
            ),
            helper.make_node(
                "Unsqueeze", [x, axis1], [names["Unsqueeze"]], name=f"{scope}/Rescore/Unsqueeze"
            ),
            helper.make_node(
                "Mul", [names["Reshape"], names["Unsqueeze"]], [names["Mul"]], name=f"{scope}/Rescore/Mul"
            ),
            helper.make_node(
                "ReduceSum",
                [names["Mul"], axis2],
                [names["ReduceSum"]],
                name=f"{scope}/Rescore/ReduceSum",
                keepdims=0,
            ),
            helper.make_node(
                "ScatterElements",
                [approx, ids, names["ReduceSum"]],
                [out],
                name=f"{scope}/Rescore/Scatter",
                axis=1,
            ),
        ]
        return nodes

    def _gathered_rows(
        self, ids: str, matrix: BlockQuantized, base: str, scope: str
    ) -> tuple[list[onnx.NodeProto], str]:
        """Rows ``ids[...]`` of a quantized matrix dequantized as ``[..., n_blocks, block_size]``."""
        if base in self.splits:
            return self._split_rows(ids, self.splits[base], base, scope)
        v, nb = matrix.n, matrix.n_blocks
        if f"{base}.gather_scales" not in self._packed:
            self._packed[f"{base}.gather_scales"] = self.add_init(
                f"{base}.gather_scales", matrix.scales.reshape(v, nb, 1)
            )
        inputs = [self.packed(base, matrix, "b"), ids, self._packed[f"{base}.gather_scales"]]
        if matrix.zero_points is not None:
            if f"{base}.gather_zero_points" not in self._packed:
                self._packed[f"{base}.gather_zero_points"] = self.add_init(
                    f"{base}.gather_zero_points", matrix.integer_zero_points().reshape(v, nb, 1)
                )
            inputs.append(self._packed[f"{base}.gather_zero_points"])
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
            if f"{base}.gather_offsets" not in self._packed:
                self._packed[f"{base}.gather_offsets"] = self.add_init(
                    f"{base}.gather_offsets", matrix.offsets.reshape(v, nb, 1)
                )
            picked, summed = f"{scope}/GatherOffsets/output_0", f"{scope}/AddOffsets/output_0"
            nodes.append(
                helper.make_node(
                    "Gather",
                    [self._packed[f"{base}.gather_offsets"], ids],
                    [picked],
                    name=f"{scope}/GatherOffsets",
                    axis=0,
                )
            )
            nodes.append(helper.make_node("Add", [gathered, picked], [summed], name=f"{scope}/AddOffsets"))
            gathered = summed
        return nodes, gathered

    # -- matrices stored as high and low codes (``nibbles``) ----------------------------

    def _split_names(self, split: NibbleSplit, base: str) -> dict[str, str]:
        """The split's initializers: both code arrays, the scales once and their gather-shaped alias."""
        high, low = f"{base}.high", f"{base}.low"
        names = {
            "high": self.packed(high, split.high, "b"),
            "low": self.packed(low, split.low, "b"),
            "scales": self.packed(high, split.high, "scales"),
        }
        key = f"{base}.gather_scales"
        if key not in self._packed:
            shape = (split.high.n, split.high.n_blocks, 1)
            self._packed[key] = self.add_alias(key, names["scales"], shape)
        names["gather_scales"] = self._packed[key]
        return names

    def _split_scan(
        self, x: str, out: str, split: NibbleSplit, base: str, scope: str, level: int
    ) -> list[onnx.NodeProto]:
        """The ranking form: MatMulNBits on the high codes, plus the low codes' mean per block sum."""
        names = self._split_names(split, base)
        high = split.high
        main = f"{scope}/Scan/MatMulNBits/output_0"
        nodes = [
            helper.make_node(
                "MatMulNBits",
                [x, names["high"], names["scales"]],
                [main],
                name=f"{scope}/Scan/MatMulNBits",
                domain=MS_DOMAIN,
                K=high.k,
                N=high.n,
                bits=high.bits,
                block_size=high.block_size,
                accuracy_level=level,
            )
        ]
        sums, sum_nodes = self._block_sum(x, high.k, high.block_size, f"{scope}/Scan")
        nodes += sum_nodes
        nodes.append(
            helper.make_node(
                "Gemm",
                [sums, names["scales"], main],
                [out],
                name=f"{scope}/Scan/LowMean",
                transB=1,
                alpha=split.low_mean * split.low_weight,
            )
        )
        return nodes

    def split_matmul(
        self, x: str, out: str, split: NibbleSplit, base: str, scope: str, level: int
    ) -> list[onnx.NodeProto]:
        """``x @ W^T`` of a matrix stored split: MatMulNBits on the high codes plus ``2**-t`` times
        MatMulNBits on the low codes (zero points 0), both reading the one set of scales ``S``."""
        names = {
            "high": self.packed(f"{base}.high", split.high, "b"),
            "low": self.packed(f"{base}.low", split.low, "b"),
            "scales": self.packed(f"{base}.high", split.high, "scales"),
        }
        low_zp = self.packed(f"{base}.low", split.low, "zp")
        hi, lo = f"{scope}/High/MatMulNBits/output_0", f"{scope}/Low/MatMulNBits/output_0"
        scaled = f"{scope}/Low/Scaled/output_0"
        key = f"{base}.split_weight"
        if key not in self._packed:
            self._packed[key] = self.add_init(key, np.array(split.low_weight, np.float32))
        common = {"domain": MS_DOMAIN, "K": split.high.k, "N": split.high.n}
        common.update(block_size=split.high.block_size, accuracy_level=level)
        return [
            helper.make_node(
                "MatMulNBits",
                [x, names["high"], names["scales"]],
                [hi],
                name=f"{scope}/High/MatMulNBits",
                bits=split.high.bits,
                **common,
            ),
            helper.make_node(
                "MatMulNBits",
                [x, names["low"], names["scales"], low_zp],
                [lo],
                name=f"{scope}/Low/MatMulNBits",
                bits=split.low.bits,
                **common,
            ),
            helper.make_node("Mul", [lo, self._packed[key]], [scaled], name=f"{scope}/Low/Scaled"),
            helper.make_node("Add", [hi, scaled], [out], name=f"{scope}/Split/Sum"),
        ]

    def _split_rows(
        self, ids: str, split: NibbleSplit, base: str, scope: str
    ) -> tuple[list[onnx.NodeProto], str]:
        """Rows as ``high + 2**-t * low``: bit for bit the 8-bit rows (see ``nibbles``).

        The low gather has no zero-point input (a zero per block would cost a byte each): it
        subtracts the default one, which ``default * scale`` of the same rows adds back exactly.
        """
        names = self._split_names(split, base)
        default = float(1 << (split.low.bits - 1))
        steps = {
            step: f"{scope}/Split/{step}/output_0"
            for step in ("High", "Low", "Scales", "Default", "LowCodes", "LowPart")
        }
        attrs = {"gather_axis": 0, "quantize_axis": 2, "block_size": split.high.block_size}
        consts = {}
        for name, value in (("default", default), ("weight", split.low_weight)):
            key = f"{base}.split_{name}"
            if key not in self._packed:
                self._packed[key] = self.add_init(key, np.array(value, np.float32))
            consts[name] = self._packed[key]
        out = f"{scope}/Split/Rows/output_0"
        nodes = [
            helper.make_node(
                "GatherBlockQuantized",
                [names["high"], ids, names["gather_scales"]],
                [steps["High"]],
                name=f"{scope}/Split/High",
                domain=MS_DOMAIN,
                bits=split.high.bits,
                **attrs,
            ),
            helper.make_node(
                "GatherBlockQuantized",
                [names["low"], ids, names["gather_scales"]],
                [steps["Low"]],
                name=f"{scope}/Split/Low",
                domain=MS_DOMAIN,
                bits=split.low.bits,
                **attrs,
            ),
            helper.make_node(
                "Gather",
                [names["gather_scales"], ids],
                [steps["Scales"]],
                name=f"{scope}/Split/Scales",
                axis=0,
            ),
            helper.make_node(
                "Mul", [steps["Scales"], consts["default"]], [steps["Default"]], name=f"{scope}/Split/Default"
            ),
            helper.make_node(
                "Add", [steps["Low"], steps["Default"]], [steps["LowCodes"]], name=f"{scope}/Split/LowCodes"
            ),
            helper.make_node(
                "Mul",
                [steps["LowCodes"], consts["weight"]],
                [steps["LowPart"]],
                name=f"{scope}/Split/LowPart",
            ),
            helper.make_node("Add", [steps["High"], steps["LowPart"]], [out], name=f"{scope}/Split/Rows"),
        ]
        return nodes, out

    def _block_sum(self, x: str, k: int, block: int, scope: str) -> tuple[str, list[onnx.NodeProto]]:
        """``x[T, K]`` summed per block of ``block`` inputs -> ``[T, n_blocks]`` (shared by all users of x).

        ``Reshape + ReduceSum`` where K is whole blocks, else one MatMul with a 0/1 block indicator
        ``[K, n_blocks]`` (a short last block needs no padding); ``block_sums`` says which is used
        and why, and the runtime's rewrite of GgufMatMul writes the same.
        """
        key = (x, k, block)
        if key in self._block_sums:
            return self._block_sums[key], []
        sums = f"{scope}/BlockSum/output_0"
        self._block_sums[key] = sums
        if self.block_sum == "reduce" and not k % block:
            shape, axes = block_sum_shape_names(k, block)
            if shape not in self._packed:
                self._packed[shape] = self.add_init(shape, np.array([0, k // block, block], np.int64))
            if axes not in self._packed:
                self._packed[axes] = self.add_init(axes, np.array([2], np.int64))
            blocks = f"{scope}/BlockSum/Reshape/output_0"
            return sums, [
                helper.make_node("Reshape", [x, shape], [blocks], name=f"{scope}/BlockSum/Reshape"),
                helper.make_node("ReduceSum", [blocks, axes], [sums], name=f"{scope}/BlockSum", keepdims=0),
            ]
        name = f"block_sum.indicator.{k}x{block}"
        if name not in self._packed:
            indicator = (np.arange(k)[:, None] // block == np.arange(-(-k // block))[None, :]).astype(
                np.float32
            )
            self._packed[name] = self.add_init(name, indicator)
        nodes = [helper.make_node("MatMul", [x, self._packed[name]], [sums], name=f"{scope}/BlockSum")]
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
        nodes, gathered = self._gathered_rows(ids, matrix, base, scope)
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
