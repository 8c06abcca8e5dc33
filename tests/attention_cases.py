"""StepAttention test cases: the op's graph, its twin GroupQueryAttention graph, feeds for a
step's rows, and the float64 reference of what the step computes."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from clika_runtime.kernels.attention_op import ATTENTION_OP, MS_DOMAIN
from clika_runtime.kernels.library import register_kernels
from clika_runtime.kernels.op import DOMAIN

POSITIONS = 2048  # rows of the rotary tables


@dataclass(frozen=True)
class Layout:
    heads: int = 9
    kv_heads: int = 3
    head_dim: int = 64
    capacity: int = 128
    rotary_half: int | None = 32  # None: no rotary inside the op
    window: int | None = None
    softcap: float = 0.0
    scale: float | None = None

    @property
    def width(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    def attributes(self) -> dict[str, float | int]:
        extra: dict[str, float | int] = {}
        if self.window:
            extra["local_window_size"] = self.window
        if self.softcap:
            extra["softcap"] = self.softcap
        if self.scale is not None:
            extra["scale"] = self.scale
        return {"num_heads": self.heads, "kv_num_heads": self.kv_heads, **extra}


@dataclass(frozen=True)
class Step:
    """Rows of one step: each row's new tokens and the tokens already in its cache."""

    new: tuple[int, ...]
    past: tuple[int, ...]
    seed: int = 0
    feeds: dict[str, np.ndarray] = field(default_factory=dict, compare=False)


# Decode rows, a prompt chunk after a past, an idle row, a prefill longer than 16 keys.
STEPS = (
    Step((1,), (0,)),
    Step((1,), (40,)),
    Step((1,) * 8, (40, 3, 17, 0, 63, 16, 31, 5)),
    Step((5, 1, 0, 3), (0, 17, 9, 40)),
    Step((70,), (0,)),
    Step((33, 1), (20, 70)),
)
LAYOUTS = (
    Layout(),
    Layout(window=16),
    Layout(softcap=30.0),
    Layout(rotary_half=16),  # a partial rotary table: the head's first 32 dims turn
    Layout(rotary_half=None, scale=0.2),
    Layout(heads=14, kv_heads=2, head_dim=32, rotary_half=16),  # 7 query heads a KV head
    Layout(heads=4, kv_heads=4, head_dim=80),  # no grouping, a head of five 16-float pieces
)


def _inputs(layout: Layout, *, grid: bool) -> list:
    f, i32, i64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
    cache = ["B", layout.kv_heads, layout.capacity, layout.head_dim]
    inputs = [
        helper.make_tensor_value_info("qkv", f, ["T", layout.width]),
        helper.make_tensor_value_info("token_cell", i64, ["T", 2]),
        helper.make_tensor_value_info("query_seqlens", i32, ["B"]),
        helper.make_tensor_value_info("seqlens_k", i32, ["B"]),
        helper.make_tensor_value_info("past_key", f, cache),
        helper.make_tensor_value_info("past_value", f, cache),
    ]
    if layout.rotary_half:
        inputs += [
            helper.make_tensor_value_info("cos", f, [POSITIONS, layout.rotary_half]),
            helper.make_tensor_value_info("sin", f, [POSITIONS, layout.rotary_half]),
        ]
    if grid:
        inputs += [
            helper.make_tensor_value_info("grid_index", i64, ["B", "S"]),
            helper.make_tensor_value_info("total_sequence_length", i32, []),
        ]
    return inputs


def _outputs(layout: Layout) -> list:
    cache = ["B", layout.kv_heads, layout.capacity, layout.head_dim]
    return [
        helper.make_tensor_value_info("out", TensorProto.FLOAT, ["T", layout.heads * layout.head_dim]),
        helper.make_tensor_value_info("present_key", TensorProto.FLOAT, cache),
        helper.make_tensor_value_info("present_value", TensorProto.FLOAT, cache),
    ]


def step_attention_model(layout: Layout, *, shapeless: bool = False, grid: bool = False) -> bytes:
    """The op alone; ``shapeless``: inputs declared without shapes, so the op's own checks meet
    whatever arrives; ``grid``: the step graph's grid inputs too, which its fallback reads."""
    tables = ["cos", "sin"] if layout.rotary_half else []
    node = helper.make_node(
        ATTENTION_OP,
        ["qkv", "token_cell", "query_seqlens", "seqlens_k", "past_key", "past_value", *tables],
        ["out", "present_key", "present_value"],
        domain=DOMAIN,
        **layout.attributes(),
    )
    inputs = _inputs(layout, grid=grid)
    if shapeless:
        inputs = [helper.make_tensor_value_info(i.name, i.type.tensor_type.elem_type, None) for i in inputs]
    graph = helper.make_graph([node], "step_attention", inputs, _outputs(layout))
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def gqa_model(layout: Layout) -> bytes:
    """What the step graph computed before the op: grid Gather, GroupQueryAttention, ungrid GatherND."""
    tables = ["cos", "sin"] if layout.rotary_half else ["", ""]
    gqa_inputs = ["grid", "", "", "past_key", "past_value", "seqlens_k", "total_sequence_length", *tables]
    nodes = [
        helper.make_node("Gather", ["qkv", "grid_index"], ["grid"], axis=0),
        helper.make_node(
            "GroupQueryAttention",
            [*gqa_inputs, *[""] * 7, "query_seqlens"],
            ["context", "present_key", "present_value"],
            domain=MS_DOMAIN,
            do_rotary=int(bool(layout.rotary_half)),
            rotary_interleaved=0,
            **layout.attributes(),
        ),
        helper.make_node("GatherND", ["context", "token_cell"], ["out"], batch_dims=0),
    ]
    graph = helper.make_graph(nodes, "gqa", _inputs(layout, grid=True), _outputs(layout))
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def session(model: bytes, threads: int = 2) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    register_kernels(options)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def rotary_tables(half: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(POSITIONS)[:, None] * (10000.0 ** (-2.0 * np.arange(half) / (2 * half)))[None]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def feeds(layout: Layout, step: Step) -> dict[str, np.ndarray]:
    """The op's feeds for ``step`` (the GQA twin also takes ``grid_index`` and ``total_sequence_length``)."""
    rng = np.random.default_rng(step.seed)
    rows, width = len(step.new), max(step.new)
    starts = np.concatenate([[0], np.cumsum(step.new)[:-1]]).astype(np.int64)
    cells = np.array([(r, c) for r, q in enumerate(step.new) for c in range(q)], np.int64).reshape(-1, 2)
    grid = np.array(
        [[starts[r] + min(c, q - 1) if q else 0 for c in range(width)] for r, q in enumerate(step.new)],
        np.int64,
    )
    seqlens_k = [p + q - 1 if q else 0 for p, q in zip(step.past, step.new, strict=True)]
    cache = (rows, layout.kv_heads, layout.capacity, layout.head_dim)
    out = {
        "qkv": rng.standard_normal((len(cells), layout.width)).astype(np.float32),
        "token_cell": cells,
        "query_seqlens": np.array(step.new, np.int32),
        "seqlens_k": np.array(seqlens_k, np.int32),
        "past_key": rng.standard_normal(cache).astype(np.float32),
        "past_value": rng.standard_normal(cache).astype(np.float32),
        "grid_index": grid,
        "total_sequence_length": np.array(max(seqlens_k) + 1, np.int32),
    }
    if layout.rotary_half:
        out["cos"], out["sin"] = rotary_tables(layout.rotary_half, layout.head_dim)
    return out


def op_feeds(all_feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in all_feeds.items() if k not in ("grid_index", "total_sequence_length")}


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = cos.shape[-1]
    a, b = x[..., :half], x[..., half : 2 * half]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin, x[..., 2 * half :]], axis=-1)


def reference(layout: Layout, f: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The step in float64: (output, present_key, present_value)."""
    h, kvh, hd = layout.heads, layout.kv_heads, layout.head_dim
    keys, values = f["past_key"].astype(np.float64), f["past_value"].astype(np.float64)
    qkv = f["qkv"].astype(np.float64)
    places = []
    for t, (row, col) in enumerate(f["token_cell"]):
        position = int(f["seqlens_k"][row]) + 1 - int(f["query_seqlens"][row]) + int(col)
        q = qkv[t, : h * hd].reshape(h, hd)
        k = qkv[t, h * hd : (h + kvh) * hd].reshape(kvh, hd)
        if layout.rotary_half:
            cos, sin = f["cos"][position].astype(np.float64), f["sin"][position].astype(np.float64)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        keys[row, :, position] = k
        values[row, :, position] = qkv[t, (h + kvh) * hd :].reshape(kvh, hd)
        places.append((row, position, q))
    scale = layout.scale if layout.scale is not None else 1.0 / np.sqrt(hd)
    out = np.zeros((len(places), h * hd))
    for t, (row, position, q) in enumerate(places):
        first = max(0, position - layout.window + 1) if layout.window else 0
        for head in range(h):
            kv = head // (h // kvh)
            scores = keys[row, kv, first : position + 1] @ q[head] * scale
            if layout.softcap:
                scores = layout.softcap * np.tanh(scores / layout.softcap)
            weights = np.exp(scores - scores.max())
            out[t, head * hd : (head + 1) * hd] = (
                weights @ values[row, kv, first : position + 1] / weights.sum()
            )
    return out, keys, values


def run_cases(cases: list[tuple[Layout, Step]]) -> list[list[np.ndarray]]:
    """Each case's op outputs (output, present_key, present_value) on this process's ISA."""
    results = []
    for layout, step in cases:
        f = op_feeds(feeds(layout, step))
        results.append(session(step_attention_model(layout)).run(None, f))
    return results
