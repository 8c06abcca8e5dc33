"""What the families read from a checkpoint's config (transformers' config.json vocabulary).

A GGUF reader maps its metadata onto the same keys, so these helpers serve
both sources: layer types (sliding or full attention), each layer's window and
rope table, the partial rotary dims, the activation, and refusals by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.graph.decoder_spec import GLOBAL_ROPE, LayerSpec, RopeSpec
from clika_export.graph.rope import check_rope_type
from clika_export.readers.hf import rope_settings

SLIDING, FULL = "sliding_attention", "full_attention"
LOCAL_ROPE = "local"
_ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}


def layer_types(checkpoint: Checkpoint, default: Callable[[int], str] | None = None) -> list[str]:
    """Each layer's attention type: the config's ``layer_types``, else ``default(i)``, else all full."""
    n, config = checkpoint.architecture.num_layers, checkpoint.config
    types = config.get("layer_types")
    if types is None:
        return [default(i) if default else FULL for i in range(n)]
    if not isinstance(types, list) or len(types) != n or not set(types) <= {SLIDING, FULL}:
        raise CheckpointError(f"layer_types must list {SLIDING!r} or {FULL!r} for each of the {n} layers")
    return list(types)


def sliding_window(checkpoint: Checkpoint) -> int | None:
    """The config's ``sliding_window`` (None when it has none)."""
    window = checkpoint.config.get("sliding_window")
    if window is None:
        return None
    if not isinstance(window, int) or window < 1:
        raise CheckpointError(f"sliding_window must be a positive integer, not {window!r}")
    return window


def rotary_dim(checkpoint: Checkpoint) -> int:
    """How many leading dims of a head rotate (``partial_rotary_factor``; all by default)."""
    config, head_dim = checkpoint.config, checkpoint.architecture.head_dim
    factor = config.get("partial_rotary_factor") or (config.get("rope_parameters") or {}).get(
        "partial_rotary_factor", 1.0
    )
    dim = int(head_dim * float(factor))
    if not 2 <= dim <= head_dim or dim % 2:
        raise CheckpointError(f"partial_rotary_factor {factor} gives {dim} rotary dims of {head_dim}")
    return dim


def global_rope(checkpoint: Checkpoint, dim: int | None = None) -> RopeSpec:
    """The rope table of full-attention layers (the architecture's)."""
    arch = checkpoint.architecture
    check_rope_type(arch.rope_scaling)
    return RopeSpec(arch.rope_theta, arch.rope_scaling, dim or arch.head_dim)


def ropes_by_layer_type(checkpoint: Checkpoint, types: list[str]) -> dict[str, RopeSpec]:
    """The global table, plus a local one when sliding layers rotate differently (Gemma 3)."""
    ropes = {GLOBAL_ROPE: global_rope(checkpoint)}
    if SLIDING in types:
        theta, scaling = rope_settings(checkpoint.config, SLIDING)
        check_rope_type(scaling)
        local = RopeSpec(theta, scaling, checkpoint.architecture.head_dim)
        if local != ropes[GLOBAL_ROPE]:
            ropes[LOCAL_ROPE] = local
    return ropes


def windowed_layers(
    types: list[str], window: int | None, ropes: dict[str, RopeSpec]
) -> tuple[LayerSpec, ...]:
    """A layer spec per layer type: sliding layers get the window (and the local rope if there is one)."""
    if SLIDING in types and window is None:
        raise CheckpointError("the config has sliding-attention layers but no sliding_window")
    local = LOCAL_ROPE if LOCAL_ROPE in ropes else GLOBAL_ROPE
    return tuple(LayerSpec(window=window, rope=local) if t == SLIDING else LayerSpec() for t in types)


def activation(checkpoint: Checkpoint, expected: str) -> str:
    """The MLP activation (builder's name), refused unless it is what the family's MLP uses."""
    config = checkpoint.config
    name = config.get("hidden_activation") or config.get("hidden_act") or "silu"
    built = _ACTIVATIONS.get(name)
    if built != expected:
        family = checkpoint.architecture.family
        raise CheckpointError(f"{family} checkpoint with hidden activation {name!r} is not supported")
    return built


def number(checkpoint: Checkpoint, key: str, default: float) -> float:
    """A numeric config entry (``default`` when absent or null)."""
    value: Any = checkpoint.config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckpointError(f"config entry {key} must be a number, not {value!r}")
    return float(value)


def refuse_partial_rotary(checkpoint: Checkpoint) -> None:
    """Families whose attention rotates whole heads refuse a partial rotary config by name."""
    if rotary_dim(checkpoint) != checkpoint.architecture.head_dim:
        family = checkpoint.architecture.family
        raise CheckpointError(
            f"partial rotary embeddings (partial_rotary_factor) are not supported for {family}"
        )


def llama_layers(checkpoint: Checkpoint) -> tuple[dict[str, RopeSpec], tuple[LayerSpec, ...]]:
    """Rope tables and layers of a llama-like family: SwiGLU, whole-head rotary, optional windows."""
    activation(checkpoint, "silu")
    refuse_partial_rotary(checkpoint)
    types = layer_types(checkpoint)
    ropes = {GLOBAL_ROPE: global_rope(checkpoint)}
    return ropes, windowed_layers(types, sliding_window(checkpoint) if SLIDING in types else None, ropes)
