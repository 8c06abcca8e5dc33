"""Check an exported step graph against an independent forward pass.

``reference_logits`` is a plain NumPy forward of the checkpoint (whole
sequences, no cache, layer by layer so one layer's weights are in memory at a
time). ``StepRunner`` drives the exported graph the way the engine does:
``pack_step`` inputs, the KV cache bound in place. ``check_export`` runs a
small ragged batch through prefill, chunked prefill and decode steps and
compares every logits row it asked for with the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from clika_export.checkpoint import Checkpoint
from clika_export.graph.rope import inverse_frequencies
from clika_runtime.engine.step_inputs import (
    LOGITS,
    PAST_KEY,
    PAST_VALUE,
    PRESENT_KEY,
    PRESENT_VALUE,
    pack_step,
)
from clika_runtime.manifest import Architecture
from clika_runtime.model_folder import session_options

# fp32 graphs must match the float reference this closely (max|diff| / max|ref| per logits row).
FP32_TOLERANCE = 1e-3


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """``max|got - ref| / max|ref|`` per row, the worst row."""
    got, ref = np.atleast_2d(got).astype(np.float64), np.atleast_2d(ref).astype(np.float64)
    scale = np.maximum(np.abs(ref).max(axis=-1), 1e-30)
    return float((np.abs(got - ref).max(axis=-1) / scale).max())


class StepRunner:
    """Runs the step graph over ``slots`` KV slots of ``capacity`` tokens, cache updated in place."""

    def __init__(self, session: ort.InferenceSession, arch: Architecture, slots: int, capacity: int) -> None:
        self.session = session
        self.arch = arch
        self.capacity = capacity
        shape = (slots, arch.num_kv_heads, capacity, arch.head_dim)
        self.cache = [
            (np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for _ in range(arch.num_layers)
        ]
        self.binding = session.io_binding()
        # Bound first so it stays output 0 when rebound each step.
        self.binding.bind_output(LOGITS)
        self._shared: list[ort.OrtValue] = []  # the bindings refer to these: keep them alive
        for layer, (key, value) in enumerate(self.cache):
            for past, present, array in (
                (PAST_KEY, PRESENT_KEY, key),
                (PAST_VALUE, PRESENT_VALUE, value),
            ):
                # One OrtValue over the NumPy buffer, bound as input and output: updated in place.
                shared = ort.OrtValue.ortvalue_from_numpy(array)
                self.binding.bind_ortvalue_input(past.format(layer=layer), shared)
                self.binding.bind_ortvalue_output(present.format(layer=layer), shared)
                self._shared.append(shared)

    @classmethod
    def open(
        cls, model_path: Path, arch: Architecture, slots: int, capacity: int, threads: int | None = None
    ):
        session = ort.InferenceSession(
            str(model_path), session_options(threads), providers=["CPUExecutionProvider"]
        )
        return cls(session, arch, slots, capacity)

    def step(self, rows: Sequence[tuple[int, Sequence[int], bool]]) -> list[np.ndarray]:
        """Run one step; returns each row's logits ``[n, vocab]`` (n = 0 for idle rows)."""
        packed = pack_step(rows, capacity=self.capacity)
        for name, array in packed.feeds().items():
            self.binding.bind_cpu_input(name, array)
        self.binding.bind_output(LOGITS)  # let ORT allocate: the row count changes per step
        self.session.run_with_iobinding(self.binding)
        logits = self.binding.get_outputs()[0].numpy()
        return [logits[s] for s in packed.logits_rows]


def greedy(runner: StepRunner, prompts: Sequence[Sequence[int]], new_tokens: int) -> list[list[int]]:
    """Greedy continuations of several prompts decoded together, one slot each."""
    outputs: list[list[int]] = [[] for _ in prompts]
    past = [0] * len(prompts)
    feed = [list(p) for p in prompts]
    for _ in range(new_tokens):
        logits = runner.step([(past[b], feed[b], False) for b in range(len(prompts))])
        for b, row in enumerate(logits):
            past[b] += len(feed[b])
            token = int(np.argmax(row[-1]))
            outputs[b].append(token)
            feed[b] = [token]
    return outputs


# -- the NumPy reference -------------------------------------------------------


def reference_logits(checkpoint: Checkpoint, sequences: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Every position's logits ``[len, vocab]`` of each sequence, computed in NumPy float32."""
    arch = checkpoint.architecture
    embed = checkpoint.tensor("model.embed_tokens.weight").astype(np.float32)
    hidden = [embed[np.asarray(s, dtype=np.int64)] for s in sequences]
    inv_freq = inverse_frequencies(arch.head_dim, arch.rope_theta, arch.rope_scaling)
    for layer in range(arch.num_layers):
        weights = _layer_weights(checkpoint, layer)
        hidden = [_layer_forward(arch, weights, h, inv_freq) for h in hidden]
    norm = checkpoint.tensor("model.norm.weight").astype(np.float32)
    head = embed if arch.tie_word_embeddings else checkpoint.tensor("lm_head.weight").astype(np.float32)
    return [_rms_norm(h, norm, arch.rms_norm_eps) @ head.T for h in hidden]


def _layer_weights(checkpoint: Checkpoint, layer: int) -> dict[str, np.ndarray]:
    prefix = f"model.layers.{layer}."
    names = [n for n in checkpoint.names() if n.startswith(prefix)]
    return {n[len(prefix) :]: checkpoint.tensor(n).astype(np.float32) for n in names}


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _linear(w: dict[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    y = x @ w[f"{name}.weight"].T
    bias = w.get(f"{name}.bias")
    return y + bias if bias is not None else y


def _rotate(x: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """Rotary embedding of ``x [heads, len, head_dim]`` at positions ``0..len-1``."""
    angles = np.outer(np.arange(x.shape[1], dtype=np.float32), inv_freq)
    cos, sin = np.cos(angles), np.sin(angles)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _layer_forward(
    arch: Architecture, w: dict[str, np.ndarray], h: np.ndarray, inv_freq: np.ndarray
) -> np.ndarray:
    n, hd, kv = arch.num_heads, arch.head_dim, arch.num_kv_heads
    length = h.shape[0]
    x = _rms_norm(h, w["input_layernorm.weight"], arch.rms_norm_eps)
    q = _linear(w, "self_attn.q_proj", x).reshape(length, n, hd).transpose(1, 0, 2)
    k = _linear(w, "self_attn.k_proj", x).reshape(length, kv, hd).transpose(1, 0, 2)
    v = _linear(w, "self_attn.v_proj", x).reshape(length, kv, hd).transpose(1, 0, 2)
    q, k = _rotate(q, inv_freq), _rotate(k, inv_freq)
    group = n // kv
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
    scores = np.where(np.tril(np.ones((length, length), dtype=bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    context = (scores / scores.sum(axis=-1, keepdims=True)) @ v
    h = h + _linear(w, "self_attn.o_proj", context.transpose(1, 0, 2).reshape(length, n * hd))
    x = _rms_norm(h, w["post_attention_layernorm.weight"], arch.rms_norm_eps)
    gate = _linear(w, "mlp.gate_proj", x)
    up = _linear(w, "mlp.up_proj", x)
    return h + _linear(w, "mlp.down_proj", gate / (1 + np.exp(-gate)) * up)


# -- the export check -------------------------------------------------------------


def check_export(
    model_path: Path, checkpoint: Checkpoint, *, seed: int = 0, threads: int | None = None
) -> dict[str, Any]:
    """Run a ragged batch through prefill, chunked prefill and decode; compare with the reference.

    Returns ``max_rel_logits_error`` (worst row), ``top1_agreement`` and how
    many logits rows were compared.
    """
    arch = checkpoint.architecture
    rng = np.random.default_rng(seed)
    lengths = (13, 7, 10)
    sequences = [rng.integers(0, arch.vocab_size, size=n).tolist() for n in lengths]
    reference = reference_logits(checkpoint, sequences)
    runner = StepRunner.open(model_path, arch, slots=len(sequences) + 1, capacity=32, threads=threads)
    # (past_len, count, want_all) per sequence and step; the last slot stays idle throughout.
    plan = [
        [(0, 8, True), (0, 7, False), (0, 4, False)],  # prefill of different lengths
        [(8, 4, False), None, (4, 5, True)],  # chunked prefill next to an idle row
        [(12, 1, False), None, (9, 1, False)],  # decode
    ]
    errors, agree, compared = [], 0, 0
    for step in plan:
        rows = [(0, [], False)] * (len(sequences) + 1)
        for b, entry in enumerate(step):
            if entry:
                past, count, want_all = entry
                rows[b] = (past, sequences[b][past : past + count], want_all)
        for b, logits in enumerate(runner.step(rows)):
            if not len(logits):
                continue
            past, count = rows[b][0], len(rows[b][1])
            ref = reference[b][past + count - len(logits) : past + count]
            errors.append(relative_error(logits, ref))
            agree += int((logits.argmax(-1) == ref.argmax(-1)).sum())
            compared += len(logits)
    return {
        "max_rel_logits_error": max(errors),
        "top1_agreement": agree / compared,
        "rows_compared": compared,
    }
