"""Check an exported step graph against an independent forward pass.

``StreamingReference`` is a plain NumPy forward (whole sequences, no cache)
fed the checkpoint's tensors in the order the graph builder reads them, so a
checked export reads its source once and holds one layer at a time;
``reference_logits`` feeds it straight from a checkpoint. ``StepRunner``
drives the exported graph the way the engine does: ``pack_step`` inputs, the
KV cache bound in place. ``check_graph`` runs a small ragged batch through
prefill, chunked prefill next to an idle row and decode, and compares every
logits row it asked for with the reference; ``check_export`` does both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from clika_export.checkpoint import Checkpoint
from clika_export.graph.decoder_spec import DecoderSpec, LayerSpec
from clika_export.graph.rope import inverse_frequencies
from clika_runtime.contract.manifest import Architecture, Manifest
from clika_runtime.contract.model_folder import open_session, session_options
from clika_runtime.contract.step_graph import (
    LOGITS,
    PAST_KEY,
    PAST_VALUE,
    PRESENT_KEY,
    PRESENT_VALUE,
    pack_step,
    text_only_media,
)

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
        for name, array in text_only_media(session.get_inputs()).items():  # a vision folder's graph
            self.binding.bind_cpu_input(name, array)
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
        cls,
        model_path: Path,
        manifest: Manifest,
        slots: int,
        capacity: int,
        threads: int | None = None,
        *,
        prepack: bool = True,
    ) -> StepRunner:
        """A runner over a new session on a graph of ``manifest``'s folder (its computed rope tables
        supplied); ``prepack=False`` keeps the weights mapped, not copied (less memory)."""
        options = session_options(threads)
        if not prepack:
            options.add_session_config_entry("session.disable_prepacking", "1")
        session = open_session(model_path, options, manifest.rope_tables)
        return cls(session, manifest.architecture, slots, capacity)

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


class StreamingReference:
    """A NumPy float32 forward of fixed sequences, fed tensors in the order a build reads them.

    The graph builder reads each tensor once (embedding, then layer by layer,
    then the final norm and head); handed the same arrays through ``observe``
    and told when a layer is complete, this runs the reference alongside, so a
    checked export dequantizes its source once and holds one layer at a time.
    It follows the family's ``DecoderSpec`` (an ``Architecture`` alone means the
    llama layout).
    """

    def __init__(self, spec: DecoderSpec | Architecture, sequences: Sequence[Sequence[int]]) -> None:
        if isinstance(spec, Architecture):
            spec = DecoderSpec(spec, spec.max_position_embeddings, qkv_bias=spec.attention_bias)
        self.spec = spec
        self.arch = spec.arch
        self.sequences = [list(s) for s in sequences]
        self.ropes = {
            key: (*inverse_frequencies(r.rotary_dim, r.theta, r.scaling, spec.context_window), r.rotary_dim)
            for key, r in spec.ropes.items()
        }
        self.lengths = [len(s) for s in self.sequences]
        self.hidden: np.ndarray | None = None  # the sequences stacked: [sum of lengths, hidden]
        self.layer: dict[str, np.ndarray] = {}
        self.kept: dict[str, np.ndarray] = {}
        self.done = 0

    def observe(self, name: str, array: np.ndarray) -> None:
        array = np.asarray(array, dtype=np.float32)
        if name == "model.embed_tokens.weight":
            ids = np.asarray([t for s in self.sequences for t in s], dtype=np.int64)
            self.hidden = array[ids] * np.float32(self.spec.embedding_scale)
            if self.arch.tie_word_embeddings:
                self.kept["lm_head.weight"] = array
        elif name.startswith("model.layers."):
            self.layer[name.split(".", 3)[3]] = array
        elif name in ("model.norm.weight", "lm_head.weight"):
            self.kept[name] = array

    def layer_done(self, layer: int) -> None:
        if self.hidden is None or layer != self.done:
            raise RuntimeError(f"reference fed out of order: layer {layer} after {self.done} layers")
        layer_spec = self.spec.layers[layer]
        rope = self.ropes[layer_spec.rope] if layer_spec.rope is not None else None
        self.hidden = _layer_forward(self.spec, layer_spec, self.layer, self.hidden, self.lengths, rope)
        assert self.hidden.dtype == np.float32, self.hidden.dtype
        self.layer = {}
        self.done += 1

    def logits(self) -> list[np.ndarray]:
        """Every position's logits ``[len, vocab]`` of each sequence; frees the tables."""
        if self.hidden is None or self.done != self.arch.num_layers:
            raise RuntimeError(f"reference incomplete: {self.done} of {self.arch.num_layers} layers")
        norm, head = self.kept.pop("model.norm.weight"), self.kept.pop("lm_head.weight")
        logits = _rms_norm(self.hidden, norm, self.arch.rms_norm_eps) @ head.T
        logits = logits * np.float32(self.spec.logits_scale)
        if self.spec.final_softcap > 0:
            cap = np.float32(self.spec.final_softcap)
            logits = np.tanh(logits / cap) * cap
        return np.split(logits, np.cumsum(self.lengths)[:-1])


def reference_logits(
    checkpoint: Checkpoint, sequences: Sequence[Sequence[int]], spec: DecoderSpec | None = None
) -> list[np.ndarray]:
    """Every position's logits ``[len, vocab]`` of each sequence, read straight from the checkpoint."""
    arch = checkpoint.architecture
    reference = StreamingReference(spec or arch, sequences)
    reference.observe("model.embed_tokens.weight", checkpoint.tensor("model.embed_tokens.weight"))
    for layer in range(arch.num_layers):
        prefix = f"model.layers.{layer}."
        for name in [n for n in checkpoint.names() if n.startswith(prefix)]:
            reference.observe(name, checkpoint.tensor(name))
        reference.layer_done(layer)
    for name in ("model.norm.weight", *(() if arch.tie_word_embeddings else ("lm_head.weight",))):
        reference.observe(name, checkpoint.tensor(name))
    return reference.logits()


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _linear(w: dict[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    y = x @ w[f"{name}.weight"].T
    bias = w.get(f"{name}.bias")
    return y + bias if bias is not None else y


# A rope table for the reference: inverse frequencies, attention factor, rotary dims.
Rope = tuple[np.ndarray, float, int]


def _rotate(x: np.ndarray, rope: Rope) -> np.ndarray:
    """Rotary embedding of the leading ``rotary_dim`` dims of ``x [heads, len, head_dim]``, positions from 0."""
    inv_freq, factor, dim = rope
    angles = np.outer(np.arange(x.shape[1], dtype=np.float32), inv_freq)
    cos, sin = np.cos(angles) * np.float32(factor), np.sin(angles) * np.float32(factor)
    half = dim // 2
    x1, x2, rest = x[..., :half], x[..., half:dim], x[..., dim:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], axis=-1)


def _qk_normed(
    spec: DecoderSpec, w: dict[str, np.ndarray], x: np.ndarray, name: str, heads: int
) -> np.ndarray:
    if spec.qk_norm is None:
        return x
    weight, eps = w[f"self_attn.{name}_norm.weight"], spec.arch.rms_norm_eps
    if spec.qk_norm == "full":
        return _rms_norm(x, weight, eps)
    length = x.shape[0]
    return _rms_norm(x.reshape(length, heads, -1), weight, eps).reshape(length, -1)


def _layer_forward(
    spec: DecoderSpec,
    layer: LayerSpec,
    w: dict[str, np.ndarray],
    h: np.ndarray,
    lengths: Sequence[int],
    rope: Rope | None,
) -> np.ndarray:
    """One decoder layer over the sequences stacked in ``h`` (``lengths`` rows each)."""
    arch = spec.arch
    eps, scale = arch.rms_norm_eps, np.float32(spec.residual_scale)
    pre_attn, post_attn, pre_mlp, post_mlp = spec.norm_names()
    x = _rms_norm(h, w[f"{pre_attn}.weight"], eps) if pre_attn else h
    q, k, v = (_linear(w, f"self_attn.{p}_proj", x) for p in "qkv")
    q, k = _qk_normed(spec, w, q, "q", arch.num_heads), _qk_normed(spec, w, k, "k", arch.num_kv_heads)
    bounds = np.cumsum([0, *lengths])
    context = np.concatenate(
        [
            _attention(spec, layer, q[a:b], k[a:b], v[a:b], rope)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
    )
    out = _linear(w, "self_attn.o_proj", context)
    out = _rms_norm(out, w[f"{post_attn}.weight"], eps) if post_attn else out
    h = h + out * scale
    x = _rms_norm(h, w[f"{pre_mlp}.weight"], eps) if pre_mlp else h
    gate = _linear(w, "mlp.gate_proj", x)
    up = _linear(w, "mlp.up_proj", x)
    if spec.activation == "gelu_tanh":
        c = np.float32(math.sqrt(2 / math.pi))
        act = 0.5 * gate * (1 + np.tanh(c * (gate + np.float32(0.044715) * gate**3)))
    else:
        act = gate / (1 + np.exp(-gate))
    out = _linear(w, "mlp.down_proj", act * up)
    out = _rms_norm(out, w[f"{post_mlp}.weight"], eps) if post_mlp else out
    return (h + out * scale).astype(np.float32)


def _attention(
    spec: DecoderSpec, layer: LayerSpec, q: np.ndarray, k: np.ndarray, v: np.ndarray, rope: Rope | None
) -> np.ndarray:
    """Causal grouped-query attention of one sequence (positions from 0), ``[len, n * hd]``."""
    n, kv, hd = spec.arch.num_heads, spec.arch.num_kv_heads, spec.arch.head_dim
    length = q.shape[0]
    q = q.reshape(length, n, hd).transpose(1, 0, 2)
    k = k.reshape(length, kv, hd).transpose(1, 0, 2)
    if rope is not None:
        q, k = _rotate(q, rope), _rotate(k, rope)
    v = v.reshape(length, kv, hd).transpose(1, 0, 2)
    k, v = np.repeat(k, n // kv, axis=0), np.repeat(v, n // kv, axis=0)
    scores = q @ k.transpose(0, 2, 1) * np.float32(spec.scale)
    if spec.attn_softcap > 0:
        cap = np.float32(spec.attn_softcap)
        scores = np.tanh(scores / cap) * cap
    offsets = np.arange(length)[:, None] - np.arange(length)[None, :]  # query position - key position
    visible = offsets >= 0
    if layer.window is not None:
        visible &= offsets < layer.window
    scores = np.where(visible, scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    context = (scores / scores.sum(axis=-1, keepdims=True)) @ v
    return context.transpose(1, 0, 2).reshape(length, n * hd)


# -- the export check -------------------------------------------------------------

# A ragged batch for the export check: (past_len, count, want_all) per sequence
# and step, None = idle; one more slot stays idle throughout.
CHECK_LENGTHS = (13, 7, 10)
CHECK_PLAN = (
    ((0, 8, True), (0, 7, False), (0, 4, False)),  # prefill of different lengths
    ((8, 4, False), None, (4, 5, True)),  # chunked prefill next to an idle row
    ((12, 1, False), None, (9, 1, False)),  # decode
)


def check_sequences(arch: Architecture, seed: int = 0) -> list[list[int]]:
    """The token sequences ``check_graph`` runs (random ids, fixed by ``seed``)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, arch.vocab_size, size=n).tolist() for n in CHECK_LENGTHS]


def check_graph(
    model_path: Path,
    manifest: Manifest,
    sequences: Sequence[Sequence[int]],
    reference: Sequence[np.ndarray],
    *,
    threads: int | None = None,
    on_step: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Run ``CHECK_PLAN`` over ``sequences`` and compare every logits row with ``reference``
    (``on_step`` is told after each of its steps).

    Returns ``max_rel_logits_error`` (worst row), ``top1_agreement`` and how
    many logits rows were compared.
    """
    # A few steps only: without prepacked weight copies the check adds little to the export's peak memory.
    runner = StepRunner.open(model_path, manifest, len(sequences) + 1, 32, threads, prepack=False)
    errors, agree, compared = [], 0, 0
    for step in CHECK_PLAN:
        rows = [(0, [], False)] * (len(sequences) + 1)
        for b, entry in enumerate(step):
            if entry:
                past, count, want_all = entry
                rows[b] = (past, list(sequences[b][past : past + count]), want_all)
        for b, logits in enumerate(runner.step(rows)):
            if not len(logits):
                continue
            end = rows[b][0] + len(rows[b][1])
            ref = reference[b][end - len(logits) : end]
            errors.append(relative_error(logits, ref))
            agree += int((logits.argmax(-1) == ref.argmax(-1)).sum())
            compared += len(logits)
        if on_step is not None:
            on_step()
    return {
        "max_rel_logits_error": max(errors),
        "top1_agreement": agree / compared,
        "rows_compared": compared,
    }


def check_export(
    folder: Path, checkpoint: Checkpoint, *, threads: int | None = None, spec: DecoderSpec | None = None
) -> dict[str, Any]:
    """``check_graph`` of model folder ``folder``'s continuous graph against the reference computed
    from ``checkpoint`` (reads every tensor again)."""
    manifest = Manifest.read(folder)
    sequences = check_sequences(checkpoint.architecture)
    reference = reference_logits(checkpoint, sequences, spec)
    graph = folder / manifest.graphs["continuous"].file
    return check_graph(graph, manifest, sequences, reference, threads=threads)
