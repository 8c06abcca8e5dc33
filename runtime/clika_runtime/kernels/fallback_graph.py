"""``GgufMatMul`` nodes rewritten at load into the MatMulNBits form ORT runs by itself
(``StepAttention`` nodes into GroupQueryAttention, ``attention_op``, and ``HeadRescore``
into its TopK .. ScatterElements chain, ``rescore_op``).

Where the kernel library is not loaded, each ``GgufMatMul(x, B)`` becomes what
the exporter wrote before the op existed (``clika_quant.graph_pass``), built
from the same GGUF bytes by the same code (``transcode``, ``center_zero_points``,
the MatMulNBits packing) so the two give the same initializers::

    x -> MatMulNBits(qweight, scales[, zero_points], accuracy_level) ---------\\
    x -> block sums [T, K/32] (shared by every matrix reading x) -> Gemm(offsets^T, C) -> y

(the block sums and the offsets only for types with a per-block minimum: Q4_1, Q5_1, Q4_K, Q5_K).
A node with ``activation="swiglu"`` gets back the gated MLP's nodes after its products::

    y[T, N] -> Split -> gate, up;  gate * Sigmoid(gate) * up -> [T, N/2]
The graph is edited on the protobuf wire (``proto_wire``: the runtime has no onnx
package); the computed initializers are placeholders in the graph, handed to the
session as arrays (``SessionOptions.add_external_initializers``), and the GGUF
bytes no node reads any more are dropped from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clika_runtime.kernels import proto_wire as w
from clika_runtime.kernels.attention_op import ATTENTION_OP, attention_to_gqa
from clika_runtime.kernels.block_sums import BLOCK_SUM_FORM, block_sum_shape_names
from clika_runtime.kernels.blocks import BlockQuantized, pack_b, pack_zero_points
from clika_runtime.kernels.centring import center_zero_points
from clika_runtime.kernels.gguf_matmul import (
    B_SUFFIX,
    DOMAIN,
    GGML_TYPE_NAMES,
    OP_TYPE,
    PRECISION_LEVELS,
    check_activation,
)
from clika_runtime.kernels.node_expansion import MS_DOMAIN, with_ms_opset
from clika_runtime.kernels.onnx_wire import (
    NUMPY_TYPES,
    Node,
    TensorInfo,
    decode_node,
    decode_tensor,
    inline_tensor,
    placeholder_tensor,
    tensor_name,
)
from clika_runtime.kernels.rescore_op import RESCORE_OP, rescore_to_chain
from clika_runtime.kernels.transcode import transcode


class FallbackError(ValueError):
    """A GgufMatMul node the rewrite cannot carry into MatMulNBits form (the message says why)."""


def has_kernel_ops(model_bytes: bytes) -> bool:
    """Whether a serialized graph may hold a node of the kernel library (GgufMatMul,
    StepAttention, HeadRescore): a cheap byte search, no parse."""
    named = any(op.encode() in model_bytes for op in (OP_TYPE, ATTENTION_OP, RESCORE_OP))
    return named and DOMAIN.encode() in model_bytes


@dataclass
class RewrittenGraph:
    """A graph with no GgufMatMul left, and the arrays its placeholder initializers take."""

    model: bytes
    supplied: dict[str, np.ndarray]
    nodes: int  # GgufMatMul nodes replaced
    attention: int = 0  # StepAttention nodes replaced
    heads: int = 0  # HeadRescore nodes replaced


def rewrite(model_bytes: bytes, folder: Path | None, block_sum: str = BLOCK_SUM_FORM) -> RewrittenGraph:
    """``model_bytes`` (a graph whose external data lives in ``folder``) without GgufMatMul,
    StepAttention (``attention_op.gqa_form``) or HeadRescore (``rescore_op.chain_form``).

    ``block_sum``: the offsets' block sums as "reduce" (Reshape + ReduceSum) or "matmul" (a 0/1
    indicator matrix), ``block_sums.BLOCK_SUM_FORM`` unless a benchmark compares them."""
    model = w.decode(model_bytes)
    graph_index = next((i for i, f in enumerate(model) if f.number == w.MODEL_GRAPH), None)
    if graph_index is None:
        raise FallbackError("the model has no graph")
    graph, attention = attention_to_gqa(w.decode(model[graph_index].value))
    graph, heads = rescore_to_chain(graph)
    tensors = {tensor_name(f.value): f for f in graph if f.number == w.GRAPH_INITIALIZER}
    builder = _Builder(folder, tensors, block_sum=block_sum)
    nodes: list[w.Field] = []
    for f in graph:
        if f.number != w.GRAPH_NODE:
            continue
        if OP_TYPE.encode() in f.value:
            node = decode_node(f.value)
            if node.op_type == OP_TYPE and node.domain == DOMAIN:
                nodes += [w.Field(w.GRAPH_NODE, w.LENGTH, n.encode()) for n in builder.replace(node)]
                continue
        nodes.append(f)
    still_read = {name for f in nodes for name in decode_node(f.value).inputs}
    dropped = {name for name in builder.gguf_inputs if name not in still_read}
    body = [f for f in graph if f.number != w.GRAPH_NODE and f.number != w.GRAPH_INITIALIZER]
    kept = [f for f in graph if f.number == w.GRAPH_INITIALIZER and tensor_name(f.value) not in dropped]
    new_tensors = [w.Field(w.GRAPH_INITIALIZER, w.LENGTH, t) for t in builder.tensors]
    model[graph_index] = w.message(w.MODEL_GRAPH, nodes + body + kept + new_tensors)
    return RewrittenGraph(w.encode(with_ms_opset(model)), builder.supplied, builder.count, attention, heads)


@dataclass
class _Builder:
    folder: Path | None
    initializers: dict[str, w.Field]
    tensors: list[bytes] = field(default_factory=list)
    supplied: dict[str, np.ndarray] = field(default_factory=dict)
    gguf_inputs: set[str] = field(default_factory=set)
    count: int = 0
    _block_sums: dict[tuple[str, int, int], str] = field(default_factory=dict)
    _names: set[str] = field(default_factory=set)
    block_sum: str = BLOCK_SUM_FORM

    def replace(self, node: Node) -> list[Node]:
        x, b_name = node.inputs[0], node.inputs[1]
        attrs = node.attributes
        ggml_type = GGML_TYPE_NAMES.get(int(attrs.get("ggml_type", -1)))
        precision = attrs.get("precision", "fp32")
        if ggml_type is None or precision not in PRECISION_LEVELS:
            raise FallbackError(
                f"node {node.name}: ggml_type {attrs.get('ggml_type')} / precision {precision!r} "
                f"has no MatMulNBits form (types {sorted(GGML_TYPE_NAMES)}, precisions {sorted(PRECISION_LEVELS)})"
            )
        k, n = int(attrs["K"]), int(attrs["N"])
        activation = attrs.get("activation", "none")
        try:
            check_activation(activation, n)
        except ValueError as exc:  # before the transcode: a bad node costs no work
            raise FallbackError(f"node {node.name}: {exc}") from None
        blocks = self._bytes(b_name, node.name)
        matrix = center_zero_points(transcode(ggml_type, blocks, (n, k)))
        self.gguf_inputs.add(b_name)
        self.count += 1
        base = b_name[: -len(B_SUFFIX)] if b_name.endswith(B_SUFFIX) else b_name
        scope = node.name.rsplit("/", 1)[0]
        if activation == "none":
            return self._nbits(x, node.outputs[0], matrix, base, scope, PRECISION_LEVELS[precision])
        products = f"{scope}/Products/output_0"
        nodes = self._nbits(x, products, matrix, base, scope, PRECISION_LEVELS[precision])
        return nodes + self._swiglu(products, node.outputs[0], n // 2, f"{scope}/Swiglu")

    def _swiglu(self, products: str, out: str, half: int, scope: str) -> list[Node]:
        """``silu(gate) * up`` of ``products = [gate | up]`` as the float graph computes it (ORT fuses
        ``x * Sigmoid(x)`` into one QuickGelu); the split sizes are an input, as opset 13 has it."""
        sizes = f"swiglu.split.{half}"
        self._inline(sizes, np.array([half, half], np.int64))
        gate, up, sigmoid, silu = (f"{scope}/{part}/output_0" for part in ("Gate", "Up", "Sigmoid", "Silu"))
        return [
            Node("Split", [products, sizes], [gate, up], f"{scope}/Split", "", {"axis": -1}),
            Node("Sigmoid", [gate], [sigmoid], f"{scope}/Sigmoid"),
            Node("Mul", [gate, sigmoid], [silu], f"{scope}/Silu"),
            Node("Mul", [silu, up], [out], f"{scope}/GateUp"),
        ]

    def _bytes(self, name: str, node_name: str) -> np.ndarray:
        if name not in self.initializers:
            raise FallbackError(f"node {node_name}: its B input {name!r} is not an initializer")
        info: TensorInfo = decode_tensor(self.initializers[name].value)
        if NUMPY_TYPES.get(info.data_type) != np.dtype(np.uint8) or len(info.dims) != 2:
            raise FallbackError(f"node {node_name}: B {name!r} must be a 2-D uint8 initializer")
        count = info.dims[0] * info.dims[1]
        if info.location is None:
            data = np.frombuffer(info.raw_data or b"", np.uint8)
            if data.size != count:
                raise FallbackError(f"initializer {name!r} holds {data.size} bytes, its shape {count}")
            return data.reshape(info.dims)
        if self.folder is None:
            raise FallbackError(f"initializer {name!r} is external data, but the graph has no folder")
        path = self.folder / info.location
        if not path.is_file() or path.stat().st_size < info.offset + count:
            raise FallbackError(f"initializer {name!r}: {info.location} is missing or too short")
        return np.memmap(path, np.uint8, "r", offset=info.offset, shape=(count,)).reshape(info.dims)

    def _supply(self, name: str, array: np.ndarray) -> str:
        # A name the graph holds already is the same array (the block indicator of the head's K).
        if name not in self._names and name not in self.initializers:
            self._names.add(name)
            array = np.ascontiguousarray(array)
            self.supplied[name] = array
            self.tensors.append(placeholder_tensor(name, array))
        return name

    def _nbits(
        self, x: str, out: str, matrix: BlockQuantized, base: str, scope: str, level: int
    ) -> list[Node]:
        main = out if matrix.offsets is None else f"{scope}/MatMulNBits/output_0"
        inputs = [
            x,
            self._supply(f"{base}.qweight", pack_b(matrix)),
            self._supply(f"{base}.scales", matrix.scales.astype(np.float32)),
        ]
        if matrix.zero_points is not None:
            inputs.append(self._supply(f"{base}.zero_points", pack_zero_points(matrix).reshape(-1)))
        attrs = {"K": matrix.k, "N": matrix.n, "bits": matrix.bits, "block_size": matrix.block_size}
        nodes = [
            Node(
                "MatMulNBits",
                inputs,
                [main],
                f"{scope}/MatMulNBits",
                MS_DOMAIN,
                {**attrs, "accuracy_level": level},
            )
        ]
        if matrix.offsets is not None:
            sums, sum_nodes = self._block_sum(x, matrix.k, matrix.block_size, scope)
            offsets = self._supply(f"{base}.offsets", matrix.offsets.astype(np.float32))
            nodes += sum_nodes
            nodes.append(Node("Gemm", [sums, offsets, main], [out], f"{scope}/Offsets", "", {"transB": 1}))
        return nodes

    def _block_sum(self, x: str, k: int, block: int, scope: str) -> tuple[str, list[Node]]:
        """``x[T, K]`` summed per block, once per ``x`` (``clika_quant.graph_pass._block_sum``)."""
        key = (x, k, block)
        if key in self._block_sums:
            return self._block_sums[key], []
        sums = f"{scope}/BlockSum/output_0"
        self._block_sums[key] = sums
        if self.block_sum == "reduce" and not k % block:
            shape, axes = block_sum_shape_names(k, block)
            self._inline(shape, np.array([0, k // block, block], np.int64))
            self._inline(axes, np.array([2], np.int64))
            blocks = f"{scope}/BlockSum/Reshape/output_0"
            return sums, [
                Node("Reshape", [x, shape], [blocks], f"{scope}/BlockSum/Reshape"),
                Node("ReduceSum", [blocks, axes], [sums], f"{scope}/BlockSum", "", {"keepdims": 0}),
            ]
        name = f"block_sum.indicator.{k}x{block}"
        if name not in self._names and name not in self.initializers:
            indicator = (np.arange(k)[:, None] // block == np.arange(-(-k // block))[None, :]).astype(
                np.float32
            )
            self._supply(name, indicator)
        return sums, [Node("MatMul", [x, name], [sums], f"{scope}/BlockSum")]

    def _inline(self, name: str, array: np.ndarray) -> None:
        if name not in self._names and name not in self.initializers:
            self._names.add(name)
            self.tensors.append(inline_tensor(name, array))
