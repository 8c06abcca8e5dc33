"""What a quantization pass may do, and the defaults chosen from measurements.

The defaults follow the kernel table and the frontier in this package's README
(onnxruntime 1.32, AVX2, no VNNI; SmolLM2-135M Q4_1, 1 thread):

* ``MatMulNBits`` with ``accuracy_level=4`` (int8 activations) is the fastest
  decode kernel (0.1-0.3x of an fp32 MatMul at M=1). Level 0 (fp32 compute) is
  never free inside a model: the last layer's 4-bit weights at level 0 cost 5%
  of a SmolLM2 decode step and one Q4_K matrix 11% of a Qwen2.5-0.5B step; all
  4-bit layers ~35%. Level 4 as it was cost quality (SmolLM2: 4/20 greedy
  matches with the fp32 model, perplexity 17.53-17.57 against 17.33); two free
  changes win it back:

  - ``center_zero_points``: the int8 error scales with the integer weights the
    kernel multiplies; moving each block's zero point to its mean code (the
    offset absorbs it, the weights stay the same bit for bit) cuts it 2-2.5x;
  - ``head_rescore_top_k``: the head recomputes its best logits per row in fp32
    from its own bytes, so close candidates are never swapped (<1% of a step).

  SmolLM2: perplexity 17.37-17.41, 9-11/20, mean common prefix 24.0-24.5 of 32
  (llama.cpp on the same file and prompts: 17.43, 9/20, 23.6); Qwen2.5-Coder-0.5B:
  27.59, 16/20, 27.9 (llama.cpp 27.57, 13/20, 24.0); at the old default's speed.
  ``accuracy_level_4bit_by_role`` buys more agreement for time (README frontier).
* Level 4 everywhere still changes what a tiny model answers: SmolLM2-135M's float
  model answers "What is the capital of France?" with "The" (p=0.152) over "L"
  (p=0.140), and all-level-4 noise turns it into "L'Étoile, la Marsebeau, ...". On the
  50 questions of ``clika_quant.answers`` it loses 3 the fp32 model answers (and gains
  4). ``sensitivity_budget``/``sensitivity_target_kl`` (``clika_quant.sensitivity``):
  the export measures the KL each layer and role adds at level 4 on the calibration
  conversation and computes whole layers and roles at level 0, the most KL per byte
  first, until the KL left is at most 0.0004, in models of at most 300M weights. The
  target decides, not a speed budget (``sensitivity_budget`` 1.0): the clika kernels
  read the GGUF's own blocks, whose offsets are not centred, so their int8 error is that
  of llama.cpp's Q8_1, larger than the centred MatMulNBits form's; on SmolLM2 a budget
  of 20% of the 4-bit bytes (33 of 120 matrices: all query/key/value ones and the last
  layer) left the KL at 0.0022, and ``clika chat`` answered "What is the capital of
  France?" with "L'Étoile, ..." on the AVX2 and AVX-512 int8 paths while its float twin
  answers "The capital of France is Paris." Reaching the target takes 105 of 120
  matrices (86% of the 4-bit bytes, KL left 0.00040), and the reply is the twin's on
  every ISA. Level 0 costs decode time in proportion to its bytes (the kernels' fp32
  path at one token a step: 1.6-1.8x their int8 path per matrix). Qwen2.5-Coder-0.5B
  with all its 4-bit matrices at level 4 answers the same 42 of 50 as its fp32 export:
  no pass above 300M.
* The head is ~28% of the bytes a SmolLM2 decode step reads (8 bits, the GGUF's
  Q8_0). ``head_scan_bits=4``: a 4-bit copy ranks the vocabulary and the 256 best
  logits per row are re-scored from the 8-bit bytes, so greedy decoding and top-k
  sampling see the same logits as with the exact head (the same greedy tokens on
  both models) while the head reads about half the bytes (decode 5-7% faster on
  both). The logits outside the 256 keep the copy's error:
  perplexity +0.3-0.4% (17.485, 27.650), with 16 re-scored +2.4% on SmolLM2
  (17.849), 64 +1.3%, 128 +0.8%; more candidates cost no measurable time.
* ``head_scan="auto"``: a GGUF head whose layers are ``GgufMatMul`` ranks with a 4-bit copy
  in Q4_0 blocks the kernels read in place (``clika_quant.q4_0_scan``): 4.5 bits a weight, no
  pre-pack, the re-scored rows one gather of the 8-bit bytes. Against its own high 4 bits
  (``"nibbles"``, stored split: ``clika_quant.nibbles``) it costs a copy on disk (+16 MB on
  SmolLM2-135M, +73 MB on Qwen2.5-Coder-0.5B) and gains decode time (step 5.92 against 7.08
  ms, 15.0 against 17.8 ms; ``benchmarks/peers/decode_profile.py``), peak RSS (629 against
  758 MiB for `clika generate` on the 0.5B) and perplexity (17.421 and 27.650 against 17.546
  and 27.716; llama.cpp 17.425, 27.565). In the MatMulNBits form an 8-bit head with blocks of
  32 (Q8_0, Q5_0) ranks with its own high bits, and a Q6_K head (blocks of 16, whose high
  bits read more than a copy) with a MatMulNBits copy, as a float checkpoint's head does.
* ``table_from_head``: a GGUF table that is a coarser rounding of the head's matrix is read
  from the head's blocks (``clika_quant.twin_table``; -153 MB on Qwen2.5-Coder-0.5B).
* ``--precision int8`` (``PRECISION_DEFAULTS``): a GGUF's 4-bit blocks are already
  its exact weights, so int8 changes how they are computed: 4-bit layers at level 0
  (fp32), 8-bit layers still at level 4. SmolLM2 then gives the fp32 model's greedy
  tokens (20/20, perplexity 17.405 with the scan), Qwen2.5-Coder-0.5B (whose 4-bit
  share is its 12 Q4_K matrices) 16/20, mean prefix 28.15. Only the query/key/value
  and output matrices at level 0 (25.65 on SmolLM2) or only the MLP (26.35) fall
  short of llama.cpp's prefix + 3. It costs 1.41x the int4 step on SmolLM2, 1.12x on
  Qwen (1 thread).
* Float zero points make ORT dequantize on every call (11-44x slower than fp32),
  so asymmetric blocks keep integer codes and add their float offsets as
  ``blocksum(A) @ offsets`` (exact; ~15% of a decode step). Rounding the offsets
  into integer zero points instead is 15% faster and ruins the model
  (perplexity 22.3, 0/20).
* 8-bit ``MatMulNBits`` needs ``accuracy_level=4`` (level 0 is 10-30x slower).
* ``DynamicQuantizeMatMul`` is 2-3x faster than MatMulNBits at M>=64
  (prefill) but quantizes weights per column (relative error 0.010 against
  0.0076 for 8-bit blocks of 32), so it is an option, not the default.
* An int4 output head is a known quality risk: the head defaults to 8 bits (the
  4-bit ``head_scan_bits`` copy only ranks candidates).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from clika_runtime.kernels.op import FP32_FORMS  # the op's contract names the forms

PRECISIONS = ("int4", "int8", "fp32")
METHODS = ("rtn", "search")
ZERO_POINTS = ("none", "uint8", "offset")
TABLE_PRECISIONS = ("auto", "int4", "int8", "fp32")
INT8_OPS = ("matmulnbits", "dqmm")
HEAD_SCANS = ("auto", "nibbles", "copy")
# What a precision changes over the field defaults (the int4 scheme). int8: 4-bit blocks (a GGUF's
# Q4_*, kept exactly) are computed in fp32, so only 8-bit weights see int8 activations (README "int8").
PRECISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "int8": {"accuracy_level_4bit": 0, "sensitivity_budget": None, "fp32_form": "fma"}
}


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
    # GGUF layer matrices (one GGUF type a matrix, computed at level 0 or 4) are stored as the file's
    # blocks unchanged and computed by ``ai.clika.GgufMatMul`` (``clika_runtime.kernels``: 4.5 bits
    # a Q4_K weight against MatMulNBits' 6.1 with its offsets, read in place, no packed copy); the
    # runtime rewrites them into the MatMulNBits form at load where the kernel library is not loaded
    # (kept between loads, ``clika_runtime.kernels.fallback_cache``). Decode and prefill both at least
    # as fast as MatMulNBits here (kernels/README.md); `--matmulnbits` writes that form instead.
    gguf_matmul: bool = True
    # How a GgufMatMul at level 0 runs its fp32 activations (``clika_runtime.kernels.op``):
    # "split16" lets Q4_0 / Q4_1 run them as 16-bit integers in exact integer dots where the CPU
    # has AVX-512 VNNI (1.4-2.9e-5 of the output's scale against fp32 FMA's 1.4e-7; SmolLM2-135M's
    # prefill 1.4x and its batch of 8 1.3x faster, its answers those of fp32), "fma" keeps fp32 FMA:
    # the `int8` precision and `--activations fp32` ask for the float model's products exactly.
    fp32_form: str = "split16"
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
    # and the 4-bit scan shift every logit, enough to swap close candidates; k rows cost <1% of a step.
    head_rescore_top_k: int = 256
    # With re-scoring, an 8-bit head ranks its candidates with a 4-bit copy (4: half the bytes
    # read per token; None: the head's own bytes); the re-scored k best come from the exact bytes.
    head_scan_bits: int | None = 4
    # How the 4-bit ranking form is stored: "nibbles", the head's own high bits (its codes split
    # into 4 high and 2-4 low bits, exact, no second copy: -87 MB for Qwen2.5-0.5B), where the
    # split is exact; "copy", a separate 4-bit round-to-nearest copy; "auto", the copy as Q4_0
    # blocks for a GGUF head the kernels read, else nibbles where the head's blocks are at least
    # ``block_size`` wide (a Q6_K head's 16 read more than a copy).
    head_scan: str = "auto"
    # A gated MLP's ``silu(gate) * up`` computed by the GgufMatMul of its gate and up rows
    # (``clika_quant.fuse_swiglu``): four nodes fewer a layer.
    fuse_swiglu: bool = True
    # A GGUF token table that is a coarser rounding of the same matrix as the head (a tied model
    # stored twice: Qwen2.5-Coder-0.5B's Q5_0 table beside its Q8_0 head) is read from the head's
    # blocks (``clika_quant.twin_table``): -153 MB for that model.
    table_from_head: bool = True
    # Store 5- and 6-bit layer blocks (Q5_0; Q6_K where its blocks are wide enough) as their high
    # 4 bits and a 2-bit remainder, two MatMulNBits summed (``nibbles.split_layer_blocks``): exact,
    # 6 bits a weight instead of 8, but ORT's 2-bit kernel makes the pair slower than the one
    # 8-bit op (README "Folder size"), so it is off by default.
    split_layer_blocks: bool = False
    # Requantize 8-bit layer matrices (a GGUF's Q5_0/Q6_K/Q8_0 blocks, a float source's int8) to
    # 4 bits where the KL each adds on the calibration conversation, measured one by one, keeps the
    # measured KL of the mix at most this (``clika_quant.sensitivity_bits``; None: every 8-bit
    # matrix keeps its exact form, the default: requantized weights are no longer the source's).
    requantize_target_kl: float | None = None
    # Move integer zero points of blocks with offsets to the block's mean code (same weights,
    # smaller int8-compute error; see choose.center_zero_points).
    center_zero_points: bool = True
    # Choose level 0 or 4 for whole layers and roles of 4-bit weights by the KL each adds at level 4
    # on the calibration conversation (``clika_quant.sensitivity``) until the estimated KL left is at
    # most ``sensitivity_target_kl``, with at most this share of the 4-bit bytes at level 0 (below 1:
    # a speed budget that may stop short of the target; None: no measurement, the levels above).
    sensitivity_budget: float | None = 1.0
    sensitivity_target_kl: float = 0.0004
    # Only models with at most this many weights get the pass (None: any size): a tiny model's
    # answers hinge on near ties that int8 activations tip (SmolLM2-135M lost 3 of 35 with every
    # matrix at level 4); Qwen2.5-Coder-0.5B lost none, and level 0 costs it 11% a matrix.
    sensitivity_max_parameters: int | None = 300_000_000

    def __post_init__(self) -> None:
        _check("method", self.method, METHODS)
        _check("zero_point", self.zero_point, ZERO_POINTS)
        _check("embedding", self.embedding, TABLE_PRECISIONS)
        _check("head", self.head, TABLE_PRECISIONS)
        _check("int8_op", self.int8_op, INT8_OPS)
        _check("head_scan", self.head_scan, HEAD_SCANS)
        _check("fp32_form", self.fp32_form, FP32_FORMS)
        for name in ("block_size", "int8_block_size"):
            value = getattr(self, name)
            if value not in (16, 32, 64, 128, 256):
                raise QuantError(f"{name} must be one of 16, 32, 64, 128, 256, got {value}")
        for name in ("accuracy_level_4bit", "accuracy_level_8bit", "accuracy_level", "head_accuracy_level"):
            value = getattr(self, name)
            if value not in (0, 1, 2, 3, 4) and not (value is None and not name.endswith("bit")):
                raise QuantError(f"{name} must be 0..4, got {value}")
        if self.sensitivity_budget is not None and not 0.0 < self.sensitivity_budget <= 1.0:
            raise QuantError(f"sensitivity_budget must be in (0, 1] or None, got {self.sensitivity_budget}")
        if not 0.0 <= self.sensitivity_target_kl < 1.0:
            raise QuantError(f"sensitivity_target_kl must be in [0, 1), got {self.sensitivity_target_kl}")
        if self.requantize_target_kl is not None and not 0.0 <= self.requantize_target_kl < 1.0:
            raise QuantError(
                f"requantize_target_kl must be in [0, 1) or None, got {self.requantize_target_kl}"
            )
        if self.sensitivity_max_parameters is not None and self.sensitivity_max_parameters < 1:
            raise QuantError(
                f"sensitivity_max_parameters must be positive or None, got {self.sensitivity_max_parameters}"
            )
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

    def describe(self, precision: str) -> str:
        """One line for the manifest: what a reader of the model folder should know first."""
        if precision == "fp32":
            return "fp32 weights"
        parts = [
            f"{precision}: GGUF blocks kept exactly where the source has them"
            if self.transcode
            else precision
        ]
        if self.accuracy_level is not None:
            parts.append(f"accuracy level {self.accuracy_level} everywhere")
        else:
            eight = (
                f", 8-bit at {self.accuracy_level_8bit}"
                if self.accuracy_level_8bit != self.accuracy_level_4bit
                else ""
            )
            parts.append(f"4-bit layers at accuracy level {self.accuracy_level_4bit}{eight}")
            parts += [f"{key} at level {value}" for key, value in self.accuracy_level_4bit_by_role.items()]
        if self.sensitivity_budget is not None:
            size = (
                f" in models of at most {self.sensitivity_max_parameters / 1e6:g}M weights"
                if self.sensitivity_max_parameters
                else ""
            )
            within = (
                f", within {self.sensitivity_budget:.0%} of their bytes"
                if self.sensitivity_budget < 1.0
                else ""
            )
            parts.append(
                f"those and the kernels' wider GGUF blocks at level 0 (fp32 compute){size} by whole layers and roles where int8 activations "
                f"add the most measured error per byte{within} "
                f"(until the KL left is at most {self.sensitivity_target_kl:g})"
            )
            if self.fp32_form == "split16":
                parts.append(
                    "Q4_0 / Q4_1 kept at level 0 with 16-bit integer activations where the CPU has AVX-512 VNNI"
                )
        if self.split_layer_blocks:
            parts.append("5- and 6-bit layer blocks stored as 4 + 2 bits")
        if self.requantize_target_kl is not None:
            parts.append(
                "8-bit layer matrices requantized to 4 bits where the measured KL of the mix stays "
                f"at most {self.requantize_target_kl:g}"
            )
        if self.gguf_matmul and self.transcode:
            parts.append(
                "GGUF layer matrices stored as the file's blocks, computed by ai.clika.GgufMatMul "
                "(MatMulNBits at load without the kernel library)"
            )
        if self.center_zero_points:
            parts.append("zero points centred on each block's mean code")
        if self.table_from_head and self.transcode:
            parts.append("a token table that rounds the head's matrix coarser is read from the head's blocks")
        if self.head_rescore_top_k:
            form = {
                "auto": "its own high 4 bits, or a 4-bit copy where its blocks are narrower",
                "nibbles": "its own high 4 bits",
                "copy": "a 4-bit copy",
            }[self.head_scan]
            scan = f" (ranked by {form})" if self.head_scan_bits else ""
            parts.append(f"head's {self.head_rescore_top_k} best logits re-scored in fp32{scan}")
        return "; ".join(parts)

    @classmethod
    def for_precision(
        cls, precision: str, values: QuantOptions | dict[str, Any] | None = None
    ) -> QuantOptions:
        """The options of a ``precision``: its defaults (``PRECISION_DEFAULTS``) under ``values``.

        A ``QuantOptions`` is taken as it is; a dict names only what differs from the defaults.
        """
        if isinstance(values, QuantOptions):
            return values
        return cls.from_dict({**PRECISION_DEFAULTS.get(precision, {}), **(values or {})})

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
