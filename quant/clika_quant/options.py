"""What a quantization pass may do, and the defaults chosen from measurements.

The defaults follow the kernel table in this package's README (onnxruntime
1.32, AVX2, no VNNI):

* ``MatMulNBits`` with ``accuracy_level=4`` (int8 compute) is the fastest
  decode kernel: 0.1-0.3x of fp32 MatMul at M=1 for 4 bits; a whole SmolLM2
  decode step takes 8.7 ms against 16.6 ms with 4-bit level 0 (fp32 compute).
  Level 0 is the quality setting: with the GGUF weights carried over exactly it
  matches the fp32 model's greedy tokens on 16/20 prompts (4/20 at level 4) and
  its perplexity (17.33 vs 17.33; 17.53 at level 4). ``accuracy_level_4bit=0``
  selects it. Float zero points
  make ORT dequantize on every call (11-44x slower than fp32), so asymmetric
  blocks keep integer codes and add their float offsets as a tiny
  ``blocksum(A) @ offsets`` MatMul (+5-15% at M=1).
* 8-bit ``MatMulNBits`` needs ``accuracy_level=4`` (level 0 is 10-30x slower).
* ``DynamicQuantizeMatMul`` is 2-3x faster than MatMulNBits at M>=64
  (prefill) but quantizes weights per column (relative error 0.010 against
  0.0076 for 8-bit blocks of 32), so it is an option, not the default.
* An int4 output head is a known quality risk: the head defaults to 8 bits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PRECISIONS = ("int4", "int8", "fp32")
METHODS = ("rtn", "search")
ZERO_POINTS = ("none", "uint8", "offset")
TABLE_PRECISIONS = ("auto", "int4", "int8", "fp32")
INT8_OPS = ("matmulnbits", "dqmm")


class QuantError(ValueError):
    """Quantization options or inputs that cannot work (the message names the problem)."""


@dataclass(frozen=True)
class QuantOptions:
    """Knobs of the weight pass; every field is recorded in the manifest.

    ``transcode``: carry GGUF blocks over exactly where an exact form exists.
    ``method``/``zero_point``/``block_size``: how float weights become int4.
    ``embedding``/``head``: the precision of the token table and the output
    head ("auto": the source's exact blocks for GGUF, else 8 bits).
    """

    block_size: int = 32
    zero_point: str = "offset"
    method: str = "search"
    # MatMulNBits accuracy level by weight width (0: fp32 compute, 4: int8 activations);
    # ``accuracy_level`` forces one level everywhere, ``head_accuracy_level`` the head's.
    accuracy_level_4bit: int = 4
    accuracy_level_8bit: int = 4
    accuracy_level: int | None = None
    transcode: bool = True
    embedding: str = "auto"
    head: str = "auto"
    int8_op: str = "matmulnbits"
    int8_block_size: int = 32
    # The output head's MatMulNBits accuracy level (None: the same as the other layers).
    head_accuracy_level: int | None = None
    # Accuracy levels of 4-bit layer weights by place, over ``accuracy_level_4bit``: keys are a
    # role ("mlp.down"), a layer ("@0"; negative counts from the last) or both ("mlp.down@-1");
    # the most specific key wins.
    accuracy_level_4bit_by_role: dict[str, int] = field(default_factory=dict)
    # The output head recomputes its k largest logits per row in fp32 (0: off): int8 activations
    # shift every logit ~1%, enough to swap close candidates; k rows cost ~1% of a decode step.
    head_rescore_top_k: int = 16
    # With re-scoring, an 8-bit head may rank its candidates with a 4-bit copy (4: half the bytes
    # read per token; None: the head's own bytes); the re-scored k best come from the exact bytes.
    head_scan_bits: int | None = None
    # Move integer zero points of blocks with offsets to the block's mean code (same weights,
    # smaller int8-compute error; see choose.center_zero_points).
    center_zero_points: bool = True

    def __post_init__(self) -> None:
        _check("method", self.method, METHODS)
        _check("zero_point", self.zero_point, ZERO_POINTS)
        _check("embedding", self.embedding, TABLE_PRECISIONS)
        _check("head", self.head, TABLE_PRECISIONS)
        _check("int8_op", self.int8_op, INT8_OPS)
        for name in ("block_size", "int8_block_size"):
            value = getattr(self, name)
            if value not in (16, 32, 64, 128, 256):
                raise QuantError(f"{name} must be one of 16, 32, 64, 128, 256, got {value}")
        for name in ("accuracy_level_4bit", "accuracy_level_8bit", "accuracy_level", "head_accuracy_level"):
            value = getattr(self, name)
            if value not in (0, 1, 2, 3, 4) and not (value is None and not name.endswith("bit")):
                raise QuantError(f"{name} must be 0..4, got {value}")
        if self.head_scan_bits not in (None, 4):
            raise QuantError(f"head_scan_bits must be None or 4, got {self.head_scan_bits}")
        if not 0 <= self.head_rescore_top_k <= 1024:
            raise QuantError(f"head_rescore_top_k must be 0..1024, got {self.head_rescore_top_k}")
        for key, value in self.accuracy_level_4bit_by_role.items():
            _parse_place(key)
            if value not in (0, 1, 2, 3, 4):
                raise QuantError(f"accuracy_level_4bit_by_role[{key!r}] must be 0..4, got {value}")

    def accuracy_for(
        self,
        bits: int,
        head: bool,
        role: str | None = None,
        layer: int | None = None,
        num_layers: int | None = None,
    ) -> int:
        """The MatMulNBits accuracy level of a group of ``bits``-bit weights of ``role`` in ``layer``."""
        if head and self.head_accuracy_level is not None:
            return self.head_accuracy_level
        if self.accuracy_level is not None:
            return self.accuracy_level
        if bits > 4:
            return self.accuracy_level_8bit
        best, level = -1, self.accuracy_level_4bit
        if self.head_scan_bits not in (None, 4):
            raise QuantError(f"head_scan_bits must be None or 4, got {self.head_scan_bits}")
        if not 0 <= self.head_rescore_top_k <= 1024:
            raise QuantError(f"head_rescore_top_k must be 0..1024, got {self.head_rescore_top_k}")
        for key, value in self.accuracy_level_4bit_by_role.items():
            key_role, key_layer = _parse_place(key)
            if key_layer is not None and key_layer < 0 and num_layers is not None:
                key_layer += num_layers
            if key_role not in (None, role) or key_layer not in (None, layer):
                continue
            rank = (key_role is not None) + 2 * (key_layer is not None)
            if rank > best:
                best, level = rank, value
        return level

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> QuantOptions:
        values = dict(values or {})
        known = set(cls.__dataclass_fields__)
        unknown = set(values) - known
        if unknown:
            raise QuantError(f"unknown quantization options {sorted(unknown)} (known: {sorted(known)})")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise QuantError(f"{name} must be one of {allowed}, got {value!r}")


def _parse_place(key: str) -> tuple[str | None, int | None]:
    """``"role"``, ``"@layer"`` or ``"role@layer"`` -> (role or None, layer or None)."""
    role, at, layer = key.partition("@")
    if not at:
        return role or _bad_place(key), None
    try:
        return role or None, int(layer)
    except ValueError:
        return _bad_place(key)


def _bad_place(key: str):
    raise QuantError(
        f"accuracy_level_4bit_by_role key {key!r} must be a role ('mlp.down'), a layer ('@0', '@-1') "
        f"or both ('mlp.down@0')"
    )


def check_precision(precision: str) -> None:
    _check("precision", precision, PRECISIONS)
