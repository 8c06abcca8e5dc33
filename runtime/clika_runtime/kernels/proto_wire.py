"""Protocol-buffer wire format: just enough to rewrite an ONNX ``ModelProto`` without onnx.

The runtime ships without the onnx package (and onnxruntime's protobuf has no
ONNX message classes), so a graph is edited at the wire level: a message is a
list of ``Field`` records, kept as their original bytes unless changed, and
encoded back in order. Only the messages the rewrite touches are decoded.

Field numbers are onnx.proto's (IR version 10), the parts the rewrite reads.
"""

from __future__ import annotations

from dataclasses import dataclass

# onnx.proto field numbers
MODEL_GRAPH, MODEL_OPSET_IMPORT = 7, 8
GRAPH_NODE, GRAPH_INITIALIZER = 1, 5
NODE_INPUT, NODE_OUTPUT, NODE_NAME, NODE_OP_TYPE, NODE_ATTRIBUTE, NODE_DOMAIN = 1, 2, 3, 4, 5, 7
ATTR_NAME, ATTR_F, ATTR_I, ATTR_S, ATTR_TYPE = 1, 2, 3, 4, 20
ATTR_FLOAT, ATTR_INT, ATTR_STRING = 1, 2, 3  # AttributeProto.AttributeType
TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_NAME, TENSOR_RAW_DATA = 1, 2, 8, 9
TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION = 13, 14
ENTRY_KEY, ENTRY_VALUE = 1, 2
OPSET_DOMAIN, OPSET_VERSION = 1, 2
EXTERNAL = 1  # TensorProto.DataLocation

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not a well-formed protocol-buffer message."""


@dataclass
class Field:
    number: int
    wire_type: int
    value: int | bytes  # an int for varints, the payload bytes otherwise


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("a varint runs past the end of the message")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("a varint is longer than 10 bytes")


def decode(buf: bytes) -> list[Field]:
    """The top-level fields of one message, in order."""
    fields, pos, end = [], 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == VARINT:
            value, pos = _varint(buf, pos)
        elif wire_type == LENGTH:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise WireError(f"field {number} runs past the end of the message")
            value, pos = bytes(buf[pos : pos + size]), pos + size
        elif wire_type in (FIXED64, FIXED32):
            size = 8 if wire_type == FIXED64 else 4
            value, pos = bytes(buf[pos : pos + size]), pos + size
        else:
            raise WireError(f"field {number} has wire type {wire_type}, which ONNX does not use")
        fields.append(Field(number, wire_type, value))
    if pos != end:
        raise WireError("the message ends inside a field")
    return fields


def _put_varint(out: bytearray, value: int) -> None:
    value &= (1 << 64) - 1  # negative int64s are ten bytes, two's complement
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def encode(fields: list[Field]) -> bytes:
    out = bytearray()
    for field in fields:
        _put_varint(out, field.number << 3 | field.wire_type)
        if field.wire_type == VARINT:
            _put_varint(out, int(field.value))
        elif field.wire_type == LENGTH:
            _put_varint(out, len(field.value))
            out += field.value
        else:
            out += field.value
    return bytes(out)


def string(number: int, text: str) -> Field:
    return Field(number, LENGTH, text.encode())


def message(number: int, fields: list[Field]) -> Field:
    return Field(number, LENGTH, encode(fields))


def varint(number: int, value: int) -> Field:
    return Field(number, VARINT, value)


def strings(fields: list[Field], number: int) -> list[str]:
    return [f.value.decode() for f in fields if f.number == number]


def first(fields: list[Field], number: int, default=None):
    """The value of the first field ``number`` (a string field's bytes), or ``default``."""
    return next((f.value for f in fields if f.number == number), default)


def ints(fields: list[Field], number: int) -> list[int]:
    """A repeated int64 field, packed or not."""
    values: list[int] = []
    for f in fields:
        if f.number != number:
            continue
        if f.wire_type == VARINT:
            values.append(f.value)
            continue
        pos = 0
        while pos < len(f.value):
            value, pos = _varint(f.value, pos)
            values.append(value)
    return [v - (1 << 64) if v >= 1 << 63 else v for v in values]
