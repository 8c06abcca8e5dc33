"""Per-matrix choice: which quantized form each weight matrix gets.

A matrix made of several checkpoint tensors (fused QKV, fused gate+up) is
handled part by part: a GGUF part is transcoded exactly, a float part is
quantized; consecutive parts with the same bit width and block size are then
merged into one ``BlockQuantized`` (a "group"), and a matrix whose parts
differ (a Q4_K query next to a Q6_K value) becomes several MatMulNBits whose
outputs are concatenated.

Groups with float offsets (Q4_1, Q4_K, Q5_K, search with offsets) are then
re-centred: ``w = s * (q - zp) + o`` holds for any integer ``zp`` once ``o``
absorbs ``s * zp``, and choosing ``zp`` near each block's mean code shrinks
the weights the int8 kernel multiplies (``accuracy_level=4`` quantizes the
activations, and that error scales with them) 2-2.5x on SmolLM2's matrices,
while the dequantized weights stay the same bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from clika_quant.options import QuantOptions
from clika_quant.rtn import quantize_rtn
from clika_quant.search import quantize_search, weighted_error
from clika_runtime.kernels.blocks import BlockQuantized
from clika_runtime.kernels.centring import center_zero_points
from clika_runtime.kernels.transcode import TRANSCODABLE, transcode


@dataclass
class Group:
    """Consecutive output rows of a matrix sharing one quantized form."""

    matrix: BlockQuantized
    sources: list[str]
    methods: list[str]
    rel_error: float | None = None

    def record(self) -> dict:
        m = self.matrix
        if m.zero_points is None:
            zp = "default"
        else:
            zp = "float" if m.float_zero_points else "uint8"
        return {
            "rows": m.n,
            "sources": self.sources,
            "method": self.methods[0] if len(set(self.methods)) == 1 else self.methods,
            "bits": m.bits,
            "block_size": m.block_size,
            "zero_points": zp,
            "offsets": m.offsets is not None,
            "rel_error": self.rel_error,
            "bytes": m.nbytes(),
        }


@dataclass
class Plan:
    """The quantized form of one matrix: ``groups`` in output-row order, or fp32 (no groups)."""

    groups: list[Group] = field(default_factory=list)

    @property
    def is_float(self) -> bool:
        return not self.groups


def float_form(weight_nk: np.ndarray, bits: int, options: QuantOptions) -> tuple[BlockQuantized, str]:
    """Quantize a float ``[N, K]`` matrix to ``bits`` as the options say."""
    if bits == 8:
        # 8-bit round-to-nearest is already within 0.5-1% (see README); symmetric keeps it simple.
        return quantize_rtn(weight_nk, 8, options.int8_block_size, "none"), "rtn"
    if options.method == "search":
        return quantize_search(weight_nk, 4, options.block_size, options.zero_point), "search"
    return quantize_rtn(weight_nk, 4, options.block_size, options.zero_point), "rtn"


def plan_matrix(
    weight_nk: Callable[[], np.ndarray],
    sources: list[str],
    raw: Callable[[str], object | None],
    bits: int | None,
    options: QuantOptions,
    measure_error: bool = True,
) -> Plan:
    """Decide the groups of one matrix.

    ``bits``: 4 or 8 for float parts (None keeps the matrix fp32). GGUF parts are
    transcoded exactly at their own width unless ``options.transcode`` is off:
    re-quantizing them to another grid only adds error (a Q4_1 matrix widened to
    8 bits holds the same weights). ``weight_nk`` loads the float matrix (rows in
    the order of ``sources``) only if some part needs it.
    """
    if bits is None:
        return Plan()
    raws = [raw(name) if options.transcode else None for name in sources]
    exact = all(r is not None and r.ggml_type in TRANSCODABLE for r in raws)
    if not exact:
        full = weight_nk()
        matrix, method = float_form(full, bits, options)
        error = weighted_error(full, matrix) if measure_error else None
        return Plan(_centered([Group(matrix, list(sources), [method], error)], options))
    parts = []
    for name, blocks in zip(sources, raws, strict=True):
        matrix = transcode(blocks.ggml_type, blocks.data, tuple(blocks.shape))
        parts.append(Group(matrix, [name], [f"gguf {blocks.ggml_type} exact"], 0.0))
    return Plan(_centered(merge_groups(parts), options))


def _centered(groups: list[Group], options: QuantOptions) -> list[Group]:
    if not options.center_zero_points:
        return groups
    return [Group(center_zero_points(g.matrix), g.sources, g.methods, g.rel_error) for g in groups]


def merge_groups(parts: list[Group]) -> list[Group]:
    """Merge consecutive parts whose bit width and block size agree."""
    merged: list[Group] = []
    for part in parts:
        last = merged[-1] if merged else None
        if last and (last.matrix.bits, last.matrix.block_size) == (part.matrix.bits, part.matrix.block_size):
            merged[-1] = Group(
                concat_rows([last.matrix, part.matrix]),
                last.sources + part.sources,
                last.methods + part.methods,
                _combined_error(last, part),
            )
        else:
            merged.append(part)
    return merged


def _combined_error(a: Group, b: Group) -> float | None:
    if a.rel_error == 0.0 and b.rel_error == 0.0:
        return 0.0
    return None


def concat_rows(matrices: list[BlockQuantized]) -> BlockQuantized:
    """Stack matrices of the same bits/block size by rows, making zero points and offsets explicit where needed."""
    first = matrices[0]
    if any(m.float_zero_points for m in matrices):
        raise ValueError("matrices with float zero points are not merged")
    explicit = any(m.zero_points is not None or m.offsets is not None for m in matrices)
    zero_points = np.concatenate([m.integer_zero_points() for m in matrices]) if explicit else None
    offsets = None
    if any(m.offsets is not None for m in matrices):
        offsets = np.concatenate(
            [m.offsets if m.offsets is not None else np.zeros(m.scales.shape, np.float32) for m in matrices]
        )
    return BlockQuantized(
        codes=np.concatenate([m.codes for m in matrices]),
        scales=np.concatenate([m.scales for m in matrices]),
        zero_points=zero_points,
        bits=first.bits,
        block_size=first.block_size,
        k=first.k,
        offsets=offsets,
    )
