"""ONNX messages on the wire format (``proto_wire``): the nodes, attributes and tensors a
graph rewrite reads and writes, without the onnx package."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from clika_runtime.kernels import proto_wire as w

# TensorProto.DataType of the arrays the rewrite writes
DATA_TYPES = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int64): 7}
NUMPY_TYPES = {value: key for key, value in DATA_TYPES.items()}
# The location of a placeholder whose values the session is handed (never a file that is read).
SUPPLIED_LOCATION = "supplied-at-load"


@dataclass
class Node:
    op_type: str
    inputs: list[str]
    outputs: list[str]
    name: str = ""
    domain: str = ""
    attributes: dict[str, int | float | str] = field(default_factory=dict)

    def encode(self) -> bytes:
        fields = [w.string(w.NODE_INPUT, name) for name in self.inputs]
        fields += [w.string(w.NODE_OUTPUT, name) for name in self.outputs]
        fields += [w.string(w.NODE_NAME, self.name), w.string(w.NODE_OP_TYPE, self.op_type)]
        fields += [w.message(w.NODE_ATTRIBUTE, _attribute(k, v)) for k, v in self.attributes.items()]
        if self.domain:
            fields.append(w.string(w.NODE_DOMAIN, self.domain))
        return w.encode(fields)


def _attribute(name: str, value: int | float | str) -> list[w.Field]:
    fields = [w.string(w.ATTR_NAME, name)]
    if isinstance(value, str):
        return fields + [w.string(w.ATTR_S, value), w.varint(w.ATTR_TYPE, w.ATTR_STRING)]
    if isinstance(value, float):
        payload = np.array(value, "<f4").tobytes()
        return fields + [w.Field(w.ATTR_F, w.FIXED32, payload), w.varint(w.ATTR_TYPE, w.ATTR_FLOAT)]
    return fields + [w.varint(w.ATTR_I, int(value)), w.varint(w.ATTR_TYPE, w.ATTR_INT)]


def decode_node(payload: bytes) -> Node:
    """A node with its int, float and string attributes (others are left out)."""
    fields = w.decode(payload)
    attributes: dict[str, int | float | str] = {}
    for f in fields:
        if f.number != w.NODE_ATTRIBUTE:
            continue
        attr = w.decode(f.value)
        name = w.first(attr, w.ATTR_NAME, b"").decode()
        kind = w.first(attr, w.ATTR_TYPE)
        if kind == w.ATTR_INT:
            value = w.first(attr, w.ATTR_I, 0)
            attributes[name] = value - (1 << 64) if value >= 1 << 63 else value
        elif kind == w.ATTR_STRING:
            attributes[name] = w.first(attr, w.ATTR_S, b"").decode()
        elif kind == w.ATTR_FLOAT:
            attributes[name] = float(np.frombuffer(w.first(attr, w.ATTR_F, b"\0" * 4), "<f4")[0])
    return Node(
        op_type=w.first(fields, w.NODE_OP_TYPE, b"").decode(),
        inputs=w.strings(fields, w.NODE_INPUT),
        outputs=w.strings(fields, w.NODE_OUTPUT),
        name=w.first(fields, w.NODE_NAME, b"").decode(),
        domain=w.first(fields, w.NODE_DOMAIN, b"").decode(),
        attributes=attributes,
    )


@dataclass(frozen=True)
class TensorInfo:
    """What a graph initializer says about its bytes: inline (``raw_data``) or in an external file."""

    name: str
    data_type: int
    dims: tuple[int, ...]
    raw_data: bytes | None
    location: str | None
    offset: int
    length: int | None


def tensor_name(payload: bytes) -> str:
    return w.first(w.decode(payload), w.TENSOR_NAME, b"").decode()


def decode_tensor(payload: bytes) -> TensorInfo:
    fields = w.decode(payload)
    external = {}
    for f in fields:
        if f.number == w.TENSOR_EXTERNAL_DATA:
            entry = w.decode(f.value)
            external[w.first(entry, w.ENTRY_KEY, b"").decode()] = w.first(entry, w.ENTRY_VALUE, b"").decode()
    is_external = w.first(fields, w.TENSOR_DATA_LOCATION, 0) == w.EXTERNAL
    return TensorInfo(
        name=w.first(fields, w.TENSOR_NAME, b"").decode(),
        data_type=w.first(fields, w.TENSOR_DATA_TYPE, 0),
        dims=tuple(w.ints(fields, w.TENSOR_DIMS)),
        raw_data=None if is_external else w.first(fields, w.TENSOR_RAW_DATA),
        location=external.get("location") if is_external else None,
        offset=int(external.get("offset", 0)),
        length=int(external["length"]) if "length" in external else None,
    )


def inline_tensor(name: str, array: np.ndarray) -> bytes:
    """A small initializer with its values in the graph."""
    array = np.ascontiguousarray(array)
    fields = [w.varint(w.TENSOR_DIMS, d) for d in array.shape]
    fields += [w.varint(w.TENSOR_DATA_TYPE, DATA_TYPES[array.dtype]), w.string(w.TENSOR_NAME, name)]
    fields.append(w.Field(w.TENSOR_RAW_DATA, w.LENGTH, array.astype(array.dtype.newbyteorder("<")).tobytes()))
    return w.encode(fields)


def placeholder_tensor(name: str, array: np.ndarray) -> bytes:
    """An initializer of ``array``'s type and shape whose values the session is handed
    (``SessionOptions.add_external_initializers`` replaces external-data initializers only)."""
    fields = [w.varint(w.TENSOR_DIMS, d) for d in array.shape]
    fields += [w.varint(w.TENSOR_DATA_TYPE, DATA_TYPES[array.dtype]), w.string(w.TENSOR_NAME, name)]
    for key, value in (("location", SUPPLIED_LOCATION), ("offset", "0"), ("length", str(array.nbytes))):
        fields.append(
            w.message(w.TENSOR_EXTERNAL_DATA, [w.string(w.ENTRY_KEY, key), w.string(w.ENTRY_VALUE, value)])
        )
    fields.append(w.varint(w.TENSOR_DATA_LOCATION, w.EXTERNAL))
    return w.encode(fields)


def opset_import(domain: str, version: int) -> bytes:
    return w.encode([w.string(w.OPSET_DOMAIN, domain), w.varint(w.OPSET_VERSION, version)])


def opset_domains(model_fields: list[w.Field]) -> dict[str, int]:
    found = {}
    for f in model_fields:
        if f.number == w.MODEL_OPSET_IMPORT:
            entry = w.decode(f.value)
            found[w.first(entry, w.OPSET_DOMAIN, b"").decode()] = w.first(entry, w.OPSET_VERSION, 0)
    return found
