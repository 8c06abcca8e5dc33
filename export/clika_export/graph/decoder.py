"""The step graph of a llama-style decoder (llama, qwen2) built from fused CPU ops.

One ORT call = one engine step for a batch of rows; the inputs are described
in ``clika_runtime.step_graph``. Dataflow::

    input_ids[T] -> Gather(embed) -> h[T, H]
    per layer:   SkipSimplifiedLayerNorm(prev mlp out, residual) -> x, residual
                 attention(x) -> SkipSimplifiedLayerNorm(+residual) -> mlp -> mlp out
    head:        Gather(logits_index) of mlp out and residual -> final norm -> lm_head -> logits[N, V]

The weight MatMuls run on the packed tokens ``[T, H]``; only attention runs on
the padded ``[B, S]`` grid. The head runs on the ``N`` picked positions only.

Weights are named predictably and stored for MatMul as ``[in, out]``
(``model.layers.3.attn.qkv.weight``); ``BuiltGraph.matrices`` records which
initializer is which matrix, for the quantization pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.graph.builder import MS_DOMAIN, ExternalData, GraphBuilder, save_model
from clika_export.graph.rope import cos_sin_caches
from clika_runtime import step_graph as io
from clika_runtime.manifest import Architecture

MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"

# Symbolic dimension names of the step graph.
TOKENS, GRID_COLS, ROWS, PICKED, CAPACITY = "tokens", "grid_cols", "rows", "logits_rows", "capacity"


@dataclass(frozen=True)
class DecoderSpec:
    """What a family tells the builder beyond the architecture facts."""

    arch: Architecture
    context_window: int
    qkv_bias: bool
    o_bias: bool = False


@dataclass
class BuiltGraph:
    """The written graph: file names, graph IO names and the weight matrices map."""

    model_file: str
    data_file: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # initializer name -> {"roles", "nodes", "layer", "layout", "shape", "sources"}
    matrices: dict[str, dict[str, Any]] = field(default_factory=dict)


def build_decoder(
    spec: DecoderSpec,
    checkpoint: Checkpoint,
    folder: Path,
    *,
    on_layer: Callable[[int], None] | None = None,
    on_tensor: Callable[[str, np.ndarray], None] | None = None,
) -> BuiltGraph:
    """Write ``model.onnx`` and ``model.onnx.data`` for ``checkpoint`` into ``folder``.

    ``on_layer(i)`` is called when layer ``i`` is written; ``on_tensor(name, array)``
    sees every checkpoint tensor as it is read (HF name and layout), once.
    """
    data = ExternalData(Path(folder) / DATA_FILE)
    try:
        builder = _DecoderBuilder(spec, checkpoint, GraphBuilder("clika_step", data), on_tensor)
        model = builder.build(on_layer)
    finally:
        data.close()
    save_model(model, Path(folder) / MODEL_FILE)
    return BuiltGraph(
        model_file=MODEL_FILE,
        data_file=DATA_FILE,
        inputs=tuple(v.name for v in model.graph.input),
        outputs=tuple(v.name for v in model.graph.output),
        matrices=builder.matrices,
    )


def _expected_shapes(a: Architecture) -> dict[str, tuple[int, ...]]:
    """Tensor shapes by ``<module>.<param>`` (HF layout: ``[out, in]`` for a Linear)."""
    q, kv, h, i = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.hidden_size, a.intermediate_size
    return {
        "embed_tokens.weight": (a.vocab_size, h),
        "lm_head.weight": (a.vocab_size, h),
        "q_proj.weight": (q, h),
        "k_proj.weight": (kv, h),
        "v_proj.weight": (kv, h),
        "o_proj.weight": (h, q),
        "q_proj.bias": (q,),
        "k_proj.bias": (kv,),
        "v_proj.bias": (kv,),
        "o_proj.bias": (h,),
        "gate_proj.weight": (i, h),
        "up_proj.weight": (i, h),
        "down_proj.weight": (h, i),
        "input_layernorm.weight": (h,),
        "post_attention_layernorm.weight": (h,),
        "norm.weight": (h,),
    }


class _DecoderBuilder:
    def __init__(
        self,
        spec: DecoderSpec,
        checkpoint: Checkpoint,
        graph: GraphBuilder,
        on_tensor: Callable[[str, np.ndarray], None] | None = None,
    ) -> None:
        self.spec = spec
        self.on_tensor = on_tensor
        self.arch = spec.arch
        self.ckpt = checkpoint
        self.g = graph
        self.matrices: dict[str, dict[str, Any]] = {}
        self._shapes = _expected_shapes(spec.arch)

    # -- whole graph ---------------------------------------------------------

    def build(self, on_layer: Callable[[int], None] | None) -> Any:
        self._declare_io()
        with self.g.scope("model"):
            self._shared_tables()
            hidden = self._embed()
            mlp_out, residual = None, hidden
            for layer in range(self.arch.num_layers):
                with self.g.scope(f"layers.{layer}"):
                    mlp_out, residual = self._layer(layer, mlp_out, residual)
                if on_layer:
                    on_layer(layer)
            self._head(mlp_out, residual)
        return self.g.model(doc="clika step graph: packed tokens, padded attention grid, in-place KV cache")

    def _declare_io(self) -> None:
        a, g = self.arch, self.g
        g.input(io.INPUT_IDS, np.int64, [TOKENS])
        g.input(io.GRID_INDEX, np.int64, [ROWS, GRID_COLS])
        g.input(io.TOKEN_CELL, np.int64, [TOKENS, 2])
        g.input(io.QUERY_SEQLENS, np.int32, [ROWS])
        g.input(io.SEQLENS_K, np.int32, [ROWS])
        g.input(io.TOTAL_SEQUENCE_LENGTH, np.int32, [])
        g.input(io.LOGITS_INDEX, np.int64, [PICKED])
        kv_shape = [ROWS, a.num_kv_heads, CAPACITY, a.head_dim]
        for layer in range(a.num_layers):
            g.input(io.PAST_KEY.format(layer=layer), np.float32, kv_shape)
            g.input(io.PAST_VALUE.format(layer=layer), np.float32, kv_shape)
        g.output(io.LOGITS, np.float32, [PICKED, a.vocab_size])
        for layer in range(a.num_layers):
            g.output(io.PRESENT_KEY.format(layer=layer), np.float32, kv_shape)
            g.output(io.PRESENT_VALUE.format(layer=layer), np.float32, kv_shape)

    def _shared_tables(self) -> None:
        """Rotary tables, made once and read by every layer."""
        a = self.arch
        cos, sin = cos_sin_caches(self.spec.context_window, a.head_dim, a.rope_theta, a.rope_scaling)
        self.cos = self.g.weight("model.rotary.cos_cache", cos)
        self.sin = self.g.weight("model.rotary.sin_cache", sin)

    # -- embedding and head ----------------------------------------------------

    def _embed(self) -> str:
        table = self._tensor("model.embed_tokens.weight")
        self.embed_name = self.g.weight("model.embed_tokens.weight", table.astype(np.float32, copy=False))
        with self.g.scope("embed_tokens"):
            hidden = self.g.op("Gather", [self.embed_name, io.INPUT_IDS], axis=0)
        self._record(self.embed_name, "embed", "/model/embed_tokens/Gather", None, "out_in", table.shape)
        return hidden

    def _head(self, mlp_out: str, residual: str) -> None:
        """Final norm and lm_head on the picked positions only.

        ::

            mlp_out[T,H] --Gather(logits_index)--\\
                                                   SkipSimplifiedLayerNorm -> [N,H] -> lm_head -> logits[N,V]
            residual[T,H] --Gather(logits_index)--/
        """
        g, a = self.g, self.arch
        with g.scope("norm"):
            picked_mlp = g.op("Gather", [mlp_out, io.LOGITS_INDEX], label="GatherMlp", axis=0)
            picked_res = g.op("Gather", [residual, io.LOGITS_INDEX], label="GatherResidual", axis=0)
            weight = self._norm_weight("model.norm.weight")
            normed = self._skip_norm([picked_mlp, picked_res, weight], want_sum=False)
        with g.scope("lm_head"):
            if self.arch.tie_word_embeddings:
                # Tied: read the embedding table as [V, H] (transB) instead of storing a transpose.
                g.op("Gemm", [normed, self.embed_name], outputs=[io.LOGITS], transB=1)
                self._add_role(self.embed_name, "lm_head", "/model/lm_head/Gemm")
            else:
                head = self._tensor("lm_head.weight")
                name = g.weight("lm_head.weight", head.astype(np.float32, copy=False).T)
                g.op("MatMul", [normed, name], outputs=[io.LOGITS])
                self._record(
                    name, "lm_head", "/model/lm_head/MatMul", None, "in_out", (a.hidden_size, a.vocab_size)
                )
                self.matrices[name]["sources"] = ["lm_head.weight"]

    # -- one decoder layer ------------------------------------------------------

    def _layer(self, layer: int, prev_mlp: str | None, residual: str) -> tuple[str, str]:
        prefix = f"model.layers.{layer}"
        with self.g.scope("input_layernorm"):
            weight = self._norm_weight(f"{prefix}.input_layernorm.weight")
            if prev_mlp is None:
                # Layer 0 has no residual to add yet.
                x = self.g.op(
                    "SimplifiedLayerNormalization",
                    [residual, weight],
                    axis=-1,
                    epsilon=self.arch.rms_norm_eps,
                )
            else:
                x, residual = self._skip_norm([prev_mlp, residual, weight], want_sum=True)
        with self.g.scope("attn"):
            attn_out = self._attention(layer, x)
        with self.g.scope("post_attention_layernorm"):
            weight = self._norm_weight(f"{prefix}.post_attention_layernorm.weight")
            x, residual = self._skip_norm([attn_out, residual, weight], want_sum=True)
        with self.g.scope("mlp"):
            mlp_out = self._mlp(layer, x)
        return mlp_out, residual

    def _attention(self, layer: int, x: str) -> str:
        """Fused QKV projection, grouped-query attention on the padded grid, output projection.

        ::

            x[T,H] -> MatMul(Wqkv) (+bias) -> qkv[T,D] -> Gather(grid_index[B,S]) -> [B,S,D]
              -> GroupQueryAttention(rotary inside; past/present share one buffer) -> [B,S,nh*hd]
              -> GatherND(token_cell[T,2]) -> [T, nh*hd] -> MatMul(Wo) (+bias)

        The 2-D index arrays shape the grid themselves: no Reshape on either side.
        """
        g, a, src = self.g, self.arch, f"model.layers.{layer}.self_attn"
        qkv = self._linear(
            layer, "attn.qkv", "qkv", x, [f"{src}.{p}_proj" for p in "qkv"], self.spec.qkv_bias
        )
        with g.scope("grid"):
            grid = g.op("Gather", [qkv, io.GRID_INDEX], axis=0)
        with g.scope("gqa"):
            present = [io.PRESENT_KEY.format(layer=layer), io.PRESENT_VALUE.format(layer=layer)]
            inputs = [
                grid, "", "",
                io.PAST_KEY.format(layer=layer), io.PAST_VALUE.format(layer=layer),
                io.SEQLENS_K, io.TOTAL_SEQUENCE_LENGTH, self.cos, self.sin,
                "", "", "", "", "", "", "",  # position_ids .. k_norm_weight: unused
                io.QUERY_SEQLENS,
            ]  # fmt: skip
            # present outputs are always requested: without them GQA's results are wrong.
            context = g.op(
                "GroupQueryAttention",
                inputs,
                outputs=[g.node_name("GroupQueryAttention") + "/output_0", *present],
                domain=MS_DOMAIN,
                num_heads=a.num_heads,
                kv_num_heads=a.num_kv_heads,
                do_rotary=1,
                rotary_interleaved=0,
            )[0]
        with g.scope("ungrid"):
            packed = g.op("GatherND", [context, io.TOKEN_CELL], batch_dims=0)
        return self._linear(layer, "attn.o", "o_proj", packed, [f"{src}.o_proj"], self.spec.o_bias)

    def _mlp(self, layer: int, x: str) -> str:
        """SwiGLU with gate and up fused in one MatMul.

        ::

            x[T,H] -> MatMul(W_gate_up)[T,2I] -> Split -> gate, up
            silu(gate) * up = gate * Sigmoid(gate) * up -> MatMul(W_down) -> [T,H]
        """
        g, src = self.g, f"model.layers.{layer}.mlp"
        gate_up = self._linear(
            layer, "mlp.gate_up", "gate_up", x, [f"{src}.gate_proj", f"{src}.up_proj"], False
        )
        with g.scope("act"):
            gate, up = g.op("Split", [gate_up], outputs=2, axis=-1, num_outputs=2)
            sigmoid = g.op("Sigmoid", [gate])
            silu = g.op("Mul", [gate, sigmoid], label="Silu")
            hidden = g.op("Mul", [silu, up], label="GateUp")
        return self._linear(layer, "mlp.down", "down", hidden, [f"{src}.down_proj"], False)

    # -- helpers ---------------------------------------------------------------

    def _linear(self, layer: int, role: str, scope: str, x: str, sources: list[str], bias: bool) -> str:
        """MatMul by the concatenation of ``sources`` (HF ``[out, in]``), stored ``[in, out]``."""
        g = self.g
        parts = [self._tensor(f"{s}.weight") for s in sources]
        stacked = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        # A transposed view: the data file takes it block by block, never as a whole copy.
        weight = stacked.astype(np.float32, copy=False).T
        name = f"model.layers.{layer}.{role}.weight"
        g.weight(name, weight)
        with g.scope(scope):
            y = g.op("MatMul", [x, name])
            self._record(name, role, g.node_name("MatMul"), layer, "in_out", weight.shape)
            self.matrices[name]["sources"] = [f"{s}.weight" for s in sources]
            if bias:
                values = np.concatenate([self._tensor(f"{s}.bias") for s in sources]).astype(np.float32)
                y = g.op("Add", [y, g.weight(f"model.layers.{layer}.{role}.bias", values)])
        return y

    def _skip_norm(self, inputs: list[str], *, want_sum: bool) -> Any:
        """RMSNorm(a + b) and, when asked, the sum itself (the new residual)."""
        g = self.g
        label = "SkipSimplifiedLayerNormalization"
        outs = [
            f"{g.node_name(label)}/output_0",
            "",
            "",
            f"{g.node_name(label)}/output_3" if want_sum else "",
        ]
        while outs[-1] == "":
            outs.pop()
        result = g.op(label, inputs, outputs=outs, domain=MS_DOMAIN, epsilon=self.arch.rms_norm_eps)
        return (result[0], result[3]) if want_sum else result

    def _norm_weight(self, name: str) -> str:
        return self.g.weight(name, self._tensor(name).astype(np.float32, copy=False))

    def _tensor(self, name: str) -> np.ndarray:
        """A checkpoint tensor, checked against the shape the architecture implies."""
        array = self.ckpt.tensor(name)
        expected = self._shapes.get(name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1])
        if expected is not None and tuple(array.shape) != expected:
            raise CheckpointError(
                f"tensor {name} has shape {tuple(array.shape)}, the architecture implies {expected}"
            )
        if self.on_tensor:
            self.on_tensor(name, array)
        return array

    def _record(
        self, name: str, role: str, node: str, layer: int | None, layout: str, shape: tuple[int, ...]
    ) -> None:
        self.matrices[name] = {
            "roles": [role],
            "nodes": [node],
            "layer": layer,
            "layout": layout,
            "shape": [int(d) for d in shape],
            "sources": [name],
        }

    def _add_role(self, name: str, role: str, node: str) -> None:
        self.matrices[name]["roles"].append(role)
        self.matrices[name]["nodes"].append(node)
