"""The contract of the kernel library's op, ``ai.clika::GgufMatMul`` (since version 1).

Inputs ``A`` float32 ``[..., K]`` and ``B`` uint8 ``[N, row_bytes]`` (a GGUF tensor's blocks
exactly as stored, one output feature per row); output ``Y`` float32 ``[..., N]`` =
``A @ dequant(B)^T``. Attributes: ``ggml_type`` (a GGML type id below), ``K``, ``N`` and
``precision``: ``"fp32"`` (the default; fp32 activations and FMA, fp32-grade
error) or ``"int8"`` (activations quantized to int8 per 32-block, llama.cpp's numerics).
Each output element has one fixed reduction order, so a row's result is the same whatever
rows are computed beside it.

``fp32_form="split16"`` lets an fp32 node of Q4_0 or Q4_1 blocks run its activations as 16-bit
integers of each 32-block's largest magnitude, in exact integer dots, where the CPU has AVX-512
VNNI (kernels/README.md: 1.4-2.9e-5 of the output's scale against 1.4e-7, and SmolLM2-135M's
prefill 1.4x faster); elsewhere, and with the default ``"fma"`` (not written to a node), the
node runs fp32 FMA. The fallback's MatMulNBits form is fp32 either way.

``activation="swiglu"`` makes it a gated MLP's first half: ``B``'s first ``N/2`` rows are the
gate, the rest the up projection, and ``Y [..., N/2] = silu(A @ gate^T) * (A @ up^T)``
(silu to within 2e-7 relative, the same bits on every ISA). The default ``"none"`` is not
written to a node, so graphs without the fusion read as they did.
"""

from __future__ import annotations

from clika_runtime.kernels.gguf_layout import BLOCK_LAYOUT

DOMAIN = "ai.clika"
OP_TYPE = "GgufMatMul"
OP_VERSION = 1
PRECISIONS = ("fp32", "int8")
ACTIVATIONS = ("none", "swiglu")
FP32_FORMS = ("fma", "split16")
# The formats an fp32_form of "split16" changes (the others run fp32 FMA whatever it says).
SPLIT16_TYPES = ("Q4_0", "Q4_1")


def fp32_form_of_type(ggml_type: str | None, fp32_form: str) -> str:
    """What ``fp32_form`` means for a node of ``ggml_type``: itself where it changes the format,
    else "fma" (which is not written to a node or a record)."""
    return fp32_form if ggml_type in SPLIT16_TYPES else "fma"


# GGML type ids of the formats the op computes (their blocks: ``gguf_layout``).
GGML_TYPE_IDS = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}


def stored_row_bytes(ggml_type: str, k: int) -> int:
    """Bytes of one stored row of ``k`` weights; ValueError for an unknown type or a ragged ``k``."""
    if ggml_type not in BLOCK_LAYOUT:
        raise ValueError(f"GgufMatMul computes {', '.join(BLOCK_LAYOUT)}, not {ggml_type!r}")
    weights, nbytes = BLOCK_LAYOUT[ggml_type]
    if k <= 0 or k % weights:
        raise ValueError(f"K={k} is not a positive multiple of {ggml_type}'s {weights}-weight block")
    return k // weights * nbytes


def check_activation(activation: str, n: int) -> None:
    """ValueError unless ``activation`` can apply to a ``GgufMatMul`` of ``n`` output rows."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {', '.join(ACTIVATIONS)}")
    if activation == "swiglu" and n % 2:
        raise ValueError(f"N={n} must be even for activation swiglu (gate rows, then up rows)")


def op_attributes(
    ggml_type: str,
    k: int,
    n: int,
    precision: str = "fp32",
    activation: str = "none",
    fp32_form: str = "fma",
) -> dict[str, int | str]:
    """The node attributes for a ``[n, k]`` weight of ``ggml_type``, checked."""
    stored_row_bytes(ggml_type, k)
    if n <= 0:
        raise ValueError(f"N={n} must be positive")
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    check_activation(activation, n)
    if fp32_form not in FP32_FORMS:
        raise ValueError(f"fp32_form {fp32_form!r} is not one of {', '.join(FP32_FORMS)}")
    attrs: dict[str, int | str] = {
        "ggml_type": GGML_TYPE_IDS[ggml_type],
        "K": k,
        "N": n,
        "precision": precision,
    }
    if activation != "none":
        attrs["activation"] = activation
    if fp32_form != "fma":
        attrs["fp32_form"] = fp32_form
    return attrs
