"""The step graph of a llama-style decoder (every family of ``clika_export.families``) from fused CPU ops.

One ORT call = one engine step for a batch of rows; the inputs are described
in ``clika_runtime.contract.step_graph``. Dataflow::

    input_ids[T] -> Gather(embed) -> h[T, H]  (-> ScatterND(media_rows, media_embeds) with media inputs)
    per layer:   SkipSimplifiedLayerNorm(prev mlp out, residual) -> x, residual
                 attention(x) -> SkipSimplifiedLayerNorm(+residual) -> mlp -> mlp out
    head:        Gather(logits_index) of mlp out and residual -> final norm -> lm_head -> logits[N, V]

The weight MatMuls run on the packed tokens ``[T, H]``; only attention runs on
the padded ``[B, S]`` grid. The head runs on the ``N`` picked positions only.
What a family changes (``DecoderSpec``): q/k norms before the grid, norms after
a block (``sandwich``/``post``: the pending branch is normed before its skip
add), the activation, multipliers, soft-caps, and per layer the attention
window (GQA's ``local_window_size``) and the rotary table (or none); an M-RoPE
spec rotates q and k before the grid instead (``clika_export.graph.mrope``).

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
from clika_export.graph import mrope
from clika_export.graph.builder import MS_DOMAIN, ExternalData, GraphBuilder, save_model
from clika_export.graph.decoder_spec import GLOBAL_ROPE, DecoderSpec, LayerSpec, RopeSpec
from clika_export.graph.rope_placeholders import rope_table
from clika_runtime.contract import step_graph as io
from clika_runtime.contract.rope_tables import RopeTable

MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"

# Symbolic dimension names of the step graph.
TOKENS, GRID_COLS, ROWS, PICKED, CAPACITY = "tokens", "grid_cols", "rows", "logits_rows", "capacity"
MEDIA = "media_rows"


__all__ = ["BuiltGraph", "DecoderSpec", "LayerSpec", "RopeSpec", "build_decoder"]


@dataclass
class BuiltGraph:
    """The written graph: file names, graph IO names and the weight matrices map."""

    model_file: str
    data_file: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # initializer name -> {"roles", "nodes", "layer", "layout", "shape", "sources"}
    matrices: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The rope tables the graph holds as placeholders, computed at load (the manifest's rope_tables).
    rope_tables: tuple[RopeTable, ...] = ()


def build_decoder(
    spec: DecoderSpec,
    checkpoint: Checkpoint,
    folder: Path,
    *,
    on_layer: Callable[[int], None] | None = None,
    on_tensor: Callable[[str, np.ndarray], None] | None = None,
    media_inputs: bool = False,
) -> BuiltGraph:
    """Write ``model.onnx`` and ``model.onnx.data`` for ``checkpoint`` into ``folder``.

    ``on_layer(i)`` is called when layer ``i`` is written; ``on_tensor(name, array)``
    sees every checkpoint tensor as it is read (HF name and layout), once.
    ``media_inputs``: the graph also takes ``media_embeds`` / ``media_rows`` (a folder
    with a vision tower), scattered over the token embeddings before the first layer.
    """
    data = ExternalData(Path(folder) / DATA_FILE)
    try:
        builder = _DecoderBuilder(spec, checkpoint, GraphBuilder("clika_step", data), on_tensor)
        builder.media_inputs = media_inputs
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
        rope_tables=builder.rope_tables,
    )


def _expected_shapes(spec: DecoderSpec) -> dict[str, tuple[int, ...]]:
    """Tensor shapes by ``<module>.<param>`` (HF layout: ``[out, in]`` for a Linear)."""
    a = spec.arch
    q, kv, h, i = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.hidden_size, a.intermediate_size
    full = spec.qk_norm == "full"
    return {
        "q_norm.weight": (q,) if full else (a.head_dim,),
        "k_norm.weight": (kv,) if full else (a.head_dim,),
        "pre_feedforward_layernorm.weight": (h,),
        "post_feedforward_layernorm.weight": (h,),
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
        self._shapes = _expected_shapes(spec)
        self._constants: dict[str, str] = {}
        self.media_inputs = False
        self.mrope: tuple[str, str] | None = None  # M-RoPE: every token's cos, sin (graph.mrope)
        self.rope_tables: tuple[RopeTable, ...] = ()  # an M-RoPE graph computes its own, from positions

    # -- whole graph ---------------------------------------------------------

    def build(self, on_layer: Callable[[int], None] | None) -> Any:
        self._declare_io()
        with self.g.scope("model"):
            if self.spec.mrope_section is None:
                self._shared_tables()
            else:  # the rotation runs before the grid, on positions the graph is fed
                self.tables = {}
                self.mrope = mrope.cos_sin(self.g, self.spec)
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
        if self.media_inputs:
            g.input(io.MEDIA_EMBEDS, np.float32, [MEDIA, a.hidden_size])
            g.input(io.MEDIA_ROWS, np.int64, [MEDIA])
        if self.spec.mrope_section is not None:
            mrope.declare_inputs(g)
        kv_shape = [ROWS, a.num_kv_heads, CAPACITY, a.head_dim]
        for layer in range(a.num_layers):
            g.input(io.PAST_KEY.format(layer=layer), np.float32, kv_shape)
            g.input(io.PAST_VALUE.format(layer=layer), np.float32, kv_shape)
        g.output(io.LOGITS, np.float32, [PICKED, a.vocab_size])
        for layer in range(a.num_layers):
            g.output(io.PRESENT_KEY.format(layer=layer), np.float32, kv_shape)
            g.output(io.PRESENT_VALUE.format(layer=layer), np.float32, kv_shape)

    def _shared_tables(self) -> None:
        """Rotary tables (one per rope the layers use), read by every layer: empty placeholders
        in the graph, computed when a session opens (``clika_runtime.contract.rope_tables``)."""
        used = {layer.rope for layer in self.spec.layers if layer.rope is not None}
        self.tables: dict[str, tuple[str, str]] = {}
        tables = []
        for key in sorted(used):
            rope = self.spec.ropes[key]
            prefix = "model.rotary" if key == GLOBAL_ROPE else f"model.rotary.{key}"
            table = rope_table(prefix, rope.theta, rope.scaling, rope.rotary_dim, self.spec)
            empty = np.zeros((0, rope.rotary_dim // 2), np.float32)
            self.tables[key] = (self.g.constant(table.cos, empty), self.g.constant(table.sin, empty))
            tables.append(table)
        self.rope_tables = tuple(tables)

    # -- embedding and head ----------------------------------------------------

    def _embed(self) -> str:
        table = self._tensor("model.embed_tokens.weight")
        self.embed_name = self.g.weight("model.embed_tokens.weight", table.astype(np.float32, copy=False))
        with self.g.scope("embed_tokens"):
            hidden = self.g.op("Gather", [self.embed_name, io.INPUT_IDS], axis=0)
            hidden = self._scaled(hidden, self.spec.embedding_scale, "model.embed_scale")
        if self.media_inputs:
            hidden = self._media(hidden)
        self._record(self.embed_name, "embed", "/model/embed_tokens/Gather", None, "out_in", table.shape)
        return hidden

    def _media(self, hidden: str) -> str:
        """``hidden`` with rows ``media_rows`` replaced by ``media_embeds`` (the projector's output,
        already at the text model's scale: the embedding scale applies to tokens only).

        ONNX Runtime runs the ScatterND with M = 0 (a text-only step) as a copy of ``hidden``.
        """
        g = self.g
        with g.scope("media"):
            axes = g.constant("model.media.axes", np.array([-1], dtype=np.int64))
            rows = g.op("Unsqueeze", [io.MEDIA_ROWS, axes], label="Rows")
            return g.op("ScatterND", [hidden, rows, io.MEDIA_EMBEDS])

    def _head(self, mlp_out: str, residual: str) -> None:
        """Final norm and lm_head on the picked positions only (then the logits' scale and soft-cap).

        ::

            mlp_out[T,H] --Gather(logits_index)--\\
                                                   SkipSimplifiedLayerNorm -> [N,H] -> lm_head -> logits[N,V]
            residual[T,H] --Gather(logits_index)--/
        """
        g, a, spec = self.g, self.arch, self.spec
        with g.scope("norm"):
            picked_mlp = g.op("Gather", [mlp_out, io.LOGITS_INDEX], label="GatherMlp", axis=0)
            picked_res = g.op("Gather", [residual, io.LOGITS_INDEX], label="GatherResidual", axis=0)
            weight = self._norm_weight("model.norm.weight")
            normed = self._skip_norm([picked_mlp, picked_res, weight], want_sum=False)
        shaped = spec.logits_scale != 1.0 or spec.final_softcap > 0
        logits = [g.node_name("lm_head") + "/raw"] if shaped else [io.LOGITS]
        with g.scope("lm_head"):
            if self.arch.tie_word_embeddings:
                # Tied: read the embedding table as [V, H] (transB) instead of storing a transpose.
                g.op("Gemm", [normed, self.embed_name], outputs=logits, transB=1)
                self._add_role(self.embed_name, "lm_head", "/model/lm_head/Gemm")
            else:
                head = self._tensor("lm_head.weight")
                name = g.weight("lm_head.weight", head.astype(np.float32, copy=False).T)
                g.op("MatMul", [normed, name], outputs=logits)
                self._record(
                    name, "lm_head", "/model/lm_head/MatMul", None, "in_out", (a.hidden_size, a.vocab_size)
                )
                self.matrices[name]["sources"] = ["lm_head.weight"]
        if shaped:
            with g.scope("logits"):
                self._shape_logits(logits[0])

    def _shape_logits(self, raw: str) -> None:
        """``logits * scale``, then ``cap * tanh(logits / cap)`` (Gemma 2's final soft-capping)."""
        g, spec = self.g, self.spec
        cap = spec.final_softcap
        if cap <= 0:
            g.op(
                "Mul",
                [raw, g.constant("model.logits_scale", np.float32(spec.logits_scale))],
                outputs=[io.LOGITS],
            )
            return
        scaled = self._scaled(raw, spec.logits_scale / cap, "model.logits_softcap_in")
        capped = g.op("Tanh", [scaled])
        g.op("Mul", [capped, g.constant("model.logits_softcap", np.float32(cap))], outputs=[io.LOGITS])

    # -- one decoder layer ------------------------------------------------------

    def _layer(self, layer: int, pending: str | None, residual: str) -> tuple[str, str]:
        """One layer; ``pending`` is the previous block's output not yet added to ``residual``.

        The add is fused into the next pre-norm (SkipSimplifiedLayerNorm); a block
        with a post-norm has it applied to its output before that add.
        """
        prefix = f"model.layers.{layer}"
        pre_attn, post_attn, pre_mlp, post_mlp = self.spec.norm_names()
        with self.g.scope("input_layernorm"):
            x, residual = self._block_input(pending, residual, pre_attn and f"{prefix}.{pre_attn}.weight")
        with self.g.scope("attn"):
            attn_out = self._attention(layer, x)
        attn_out = self._block_output(
            attn_out, post_attn and f"{prefix}.{post_attn}.weight", "post_attention_norm"
        )
        with self.g.scope("post_attention_layernorm"):
            x, residual = self._block_input(attn_out, residual, pre_mlp and f"{prefix}.{pre_mlp}.weight")
        with self.g.scope("mlp"):
            mlp_out = self._mlp(layer, x)
        mlp_out = self._block_output(mlp_out, post_mlp and f"{prefix}.{post_mlp}.weight", "post_mlp_norm")
        return mlp_out, residual

    def _block_input(self, pending: str | None, residual: str, norm: str | None) -> tuple[str, str]:
        """A block's input and the new residual: ``norm(residual + pending)``, or the sum itself."""
        g = self.g
        if norm is None:
            total = residual if pending is None else g.op("Add", [pending, residual], label="Residual")
            return total, total
        weight = self._norm_weight(norm)
        if pending is None:
            # Layer 0 has no residual to add yet.
            x = g.op(
                "SimplifiedLayerNormalization", [residual, weight], axis=-1, epsilon=self.arch.rms_norm_eps
            )
            return x, residual
        return self._skip_norm([pending, residual, weight], want_sum=True)

    def _block_output(self, out: str, norm: str | None, scope: str) -> str:
        """A block's output as added to the residual: post-normed and scaled where the family says."""
        g = self.g
        if norm is not None:
            with g.scope(scope):
                out = g.op(
                    "SimplifiedLayerNormalization",
                    [out, self._norm_weight(norm)],
                    axis=-1,
                    epsilon=self.arch.rms_norm_eps,
                )
        if self.spec.residual_scale != 1.0:
            with g.scope(scope.replace("norm", "scale")):
                out = self._scaled(out, self.spec.residual_scale, "model.residual_scale")
        return out

    def _attention(self, layer: int, x: str) -> str:
        """Fused QKV projection, grouped-query attention on the padded grid, output projection.

        ::

            x[T,H] -> MatMul(Wqkv) (+bias) (-> q/k RMSNorm) -> qkv[T,D] -> Gather(grid_index[B,S]) -> [B,S,D]
              -> GroupQueryAttention(rotary inside; past/present share one buffer) -> [B,S,nh*hd]
              -> GatherND(token_cell[T,2]) -> [T, nh*hd] -> MatMul(Wo) (+bias)

        The 2-D index arrays shape the grid themselves: no Reshape on either side.
        """
        g, a, spec, src = self.g, self.arch, self.spec, f"model.layers.{layer}.self_attn"
        layer_spec = spec.layers[layer]
        qkv = self._linear(
            layer, "attn.qkv", "qkv", x, [f"{src}.{p}_proj" for p in "qkv"], self.spec.qkv_bias
        )
        if spec.qk_norm:
            with g.scope("qk_norm"):
                qkv = self._qk_norm(layer, qkv)
        rotary_in_gqa = layer_spec.rope is not None and self.mrope is None
        if self.mrope is not None and layer_spec.rope is not None:
            qkv = mrope.rotate_qk(g, spec, layer, qkv, *self.mrope)
        with g.scope("grid"):
            grid = g.op("Gather", [qkv, io.GRID_INDEX], axis=0)
        with g.scope("gqa"):
            present = [io.PRESENT_KEY.format(layer=layer), io.PRESENT_VALUE.format(layer=layer)]
            cos, sin = self.tables[layer_spec.rope] if rotary_in_gqa else ("", "")
            inputs = [
                grid, "", "",
                io.PAST_KEY.format(layer=layer), io.PAST_VALUE.format(layer=layer),
                io.SEQLENS_K, io.TOTAL_SEQUENCE_LENGTH, cos, sin,
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
                do_rotary=int(rotary_in_gqa),
                rotary_interleaved=0,
                **self._attention_options(layer_spec),
            )[0]
        with g.scope("ungrid"):
            packed = g.op("GatherND", [context, io.TOKEN_CELL], batch_dims=0)
        return self._linear(layer, "attn.o", "o_proj", packed, [f"{src}.o_proj"], self.spec.o_bias)

    def _attention_options(self, layer_spec: LayerSpec) -> dict[str, Any]:
        """GQA attributes beyond the llama defaults: scale, soft-cap, the local window."""
        spec, options = self.spec, {}
        if spec.attention_scale is not None:
            options["scale"] = float(spec.attention_scale)
        if spec.attn_softcap > 0:
            options["softcap"] = float(spec.attn_softcap)
        if layer_spec.window is not None and layer_spec.window < spec.context_window:
            # Both count the keys a query sees, itself included (measured against transformers).
            options["local_window_size"] = int(layer_spec.window)
        return options

    def _qk_norm(self, layer: int, qkv: str) -> str:
        """RMSNorm of q and k before rotary: per head (weights ``[head_dim]``) or over the whole projection.

        ::

            qkv[T,D] -> Split -> q[T,nh*hd], k, v;  q -> [T,nh,hd] -> RMSNorm(q_norm) -> [T,nh*hd] (k alike)
            -> Concat(q, k, v) -> qkv[T,D]
        """
        g, a, src = self.g, self.arch, f"model.layers.{layer}.self_attn"
        widths = [a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.num_kv_heads * a.head_dim]
        split = g.constant(f"model.layers.{layer}.attn.qkv_split", np.asarray(widths, np.int64))
        q, k, v = g.op("Split", [qkv, split], outputs=3, axis=-1)
        normed = []
        for part, heads, name in ((q, a.num_heads, "q"), (k, a.num_kv_heads, "k")):
            weight = self._norm_weight(f"{src}.{name}_norm.weight")
            with g.scope(f"{name}_norm"):
                if self.spec.qk_norm == "head":
                    shape = g.constant(
                        f"model.layers.{layer}.attn.{name}_heads", np.asarray([0, heads, a.head_dim])
                    )
                    part = g.op("Reshape", [part, shape], label="Heads")
                part = g.op(
                    "SimplifiedLayerNormalization", [part, weight], axis=-1, epsilon=self.arch.rms_norm_eps
                )
                if self.spec.qk_norm == "head":
                    flat = g.constant(
                        f"model.layers.{layer}.attn.{name}_flat", np.asarray([0, heads * a.head_dim])
                    )
                    part = g.op("Reshape", [part, flat], label="Flat")
            normed.append(part)
        return g.op("Concat", [*normed, v], axis=-1)

    def _mlp(self, layer: int, x: str) -> str:
        """A gated MLP (SwiGLU, or GeGLU with tanh-approximated GELU) with gate and up fused in one MatMul.

        ::

            x[T,H] -> MatMul(W_gate_up)[T,2I] -> Split -> gate, up
            act(gate) * up -> MatMul(W_down) -> [T,H]      (silu(g) = g * Sigmoid(g))
        """
        g, src = self.g, f"model.layers.{layer}.mlp"
        gate_up = self._linear(
            layer, "mlp.gate_up", "gate_up", x, [f"{src}.gate_proj", f"{src}.up_proj"], False
        )
        with g.scope("act"):
            gate, up = g.op("Split", [gate_up], outputs=2, axis=-1, num_outputs=2)
            if self.spec.activation == "gelu_tanh":
                act = g.op("Gelu", [gate], approximate="tanh")
            else:
                sigmoid = g.op("Sigmoid", [gate])
                act = g.op("Mul", [gate, sigmoid], label="Silu")
            hidden = g.op("Mul", [act, up], label="GateUp")
        return self._linear(layer, "mlp.down", "down", hidden, [f"{src}.down_proj"], False)

    def _scaled(self, x: str, factor: float, name: str) -> str:
        """``x * factor`` (no node when the factor is 1); the constant is shared by name."""
        if factor == 1.0:
            return x
        if name not in self._constants:
            self._constants[name] = self.g.constant(name, np.float32(factor))
        return self.g.op("Mul", [x, self._constants[name]], label="Scale")

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
