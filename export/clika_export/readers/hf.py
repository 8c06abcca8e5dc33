"""Read a Hugging Face model folder into a ``Checkpoint``.

A folder holds ``config.json``, the weights as ``*.safetensors`` (one file, or
shards listed by ``model.safetensors.index.json``), ``tokenizer.json`` (a fast
tokenizer; slow-only tokenizers are refused), optionally
``tokenizer_config.json`` (special tokens, ``add_bos_token``, the chat
template), ``chat_template.jinja`` and ``generation_config.json``.

``add_bos_token`` in the checkpoint means "a prompt starts with BOS": it is the
tokenizer config's flag when it has one, otherwise whether ``tokenizer.json``
puts BOS in front of an encoded text itself.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from clika_export.checkpoint import Checkpoint, CheckpointError, check_architecture, check_layers_exist
from clika_export.graph.rope import rope_type
from clika_export.readers.layouts import SHIFTED_NORM_FAMILIES, fused_phi3_names, row_slices, shifted_norm
from clika_export.readers.multimodal import refuse_unbuilt, text_part
from clika_export.readers.pooling import hf_pooling
from clika_export.readers.regular_file import file_sha256
from clika_export.readers.safetensors_file import tensor_loaders
from clika_runtime.contract.manifest import Architecture

INDEX_FILE = "model.safetensors.index.json"
# Files whose bytes define the checkpoint; their hashes make the source sha256.
_HASHED = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",  # a multimodal checkpoint's image processor (exported beside it)
    INDEX_FILE,
)
# model_type -> the family name (Gemma 3's text-only checkpoints say "gemma3_text").
_FAMILY_NAMES = {"gemma3_text": "gemma3"}
# Activations the MLP builds (transformers' names).
ACTIVATIONS = ("silu", "gelu_pytorch_tanh")
# generation_config.json keys carried over as decode defaults (named as the runtime names them).
_GENERATION_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens")


def is_hf_folder(path: Path) -> bool:
    """True when ``path`` looks like a Hugging Face model folder."""
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()


def read_hf(folder: str | Path) -> Checkpoint:
    """Read a Hugging Face folder; tensors load lazily as float32."""
    folder = Path(folder)
    if not is_hf_folder(folder):
        raise CheckpointError(f"{folder.name} is not a Hugging Face model folder: no config.json")
    config = _json(folder / "config.json")
    refuse_unbuilt(config)  # named before anything else of the folder is read
    config, loaders = text_part(config, _weights(folder))  # a multimodal checkpoint's text model
    arch = architecture(config, has_lm_head="lm_head.weight" in loaders)
    check_layers_exist(arch, loaders, "config.json")
    loaders = _llama_layout(arch, loaders)
    return Checkpoint(architecture=arch, tensor_loaders=loaders, config=config, **text_parts(folder, config))


def text_parts(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Everything of a Hugging Face folder but its weights, as ``Checkpoint`` fields: the tokenizer,
    special tokens, chat template, generation defaults and where it came from."""
    generation = _json(folder / "generation_config.json", required=False)
    tok_config = _json(folder / "tokenizer_config.json", required=False)
    tokenizer_json = _tokenizer_json(folder)
    tokenizer = Tokenizer.from_str(tokenizer_json)
    bos_token = _token_text(tok_config.get("bos_token"))
    eos_token = _token_text(tok_config.get("eos_token"))
    bos_id = _first(config.get("bos_token_id"), generation.get("bos_token_id"), _id(tokenizer, bos_token))
    return dict(
        tokenizer_json=tokenizer_json,
        bos_token_id=bos_id,
        eos_token_ids=_eos_ids(config, generation, tokenizer, eos_token),
        pad_token_id=_first(
            _id(tokenizer, _token_text(tok_config.get("pad_token"))),
            config.get("pad_token_id"),
            generation.get("pad_token_id"),
            key="pad_token_id",
        ),
        add_bos_token=_add_bos(tok_config, tokenizer, bos_id),
        chat_template=_chat_template(folder, tok_config),
        generation_defaults=_generation_defaults(generation),
        source_name=folder.name,
        source_format="hf",
        source_sha256=folder_sha256(folder),
        bos_token=bos_token if bos_token is not None else _token(tokenizer, bos_id),
        eos_token=eos_token,
        pooling=hf_pooling(folder),
    )


def read_config(folder: str | Path) -> dict[str, Any]:
    """A Hugging Face folder's ``config.json`` (CheckpointError when it is missing or not an object)."""
    return _json(Path(folder) / "config.json")


def model_type(config: dict[str, Any]) -> str:
    """The config's ``model_type``, lower case (CheckpointError when it has none)."""
    name = config.get("model_type")
    if not isinstance(name, str) or not name:
        raise CheckpointError("config.json has no model_type")
    return name.lower()


def family_name(config: dict[str, Any]) -> str:
    """The native family name a config's ``model_type`` goes by (Gemma 3 text: "gemma3")."""
    name = model_type(config)
    return _FAMILY_NAMES.get(name, name)


def architecture(config: dict[str, Any], *, has_lm_head: bool = True) -> Architecture:
    """The architecture facts of a transformers ``config.json``."""
    family = family_name(config)
    _refuse_unsupported(config, family)
    heads = _config_number(config, "num_attention_heads", int)
    hidden = _config_number(config, "hidden_size", int)
    try:
        theta, scaling = rope_settings(config, "full_attention")
    except (TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"config.json: the rope settings cannot be read ({exc})") from None
    tied = bool(config.get("tie_word_embeddings", False))
    if not tied and not has_lm_head:
        raise CheckpointError("config.json says the embeddings are not tied, but there is no lm_head.weight")
    arch = Architecture(
        family=family,
        num_layers=_config_number(config, "num_hidden_layers", int),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=_config_number(config, "num_key_value_heads", int, heads),
        head_dim=_config_number(config, "head_dim", int, hidden // heads if heads > 0 else 0),
        intermediate_size=_config_number(config, "intermediate_size", int),
        vocab_size=_config_number(config, "vocab_size", int),
        rms_norm_eps=_config_number(config, "rms_norm_eps", float, 1e-6),
        rope_theta=theta,
        max_position_embeddings=_config_number(config, "max_position_embeddings", int, 2048),
        tie_word_embeddings=tied,
        attention_bias=bool(config.get("attention_bias", family == "qwen2")),
        rope_scaling=scaling,
    )
    check_architecture(arch, "config.json")
    return arch


def _config_number(config: dict[str, Any], key: str, kind: type, default: Any = None) -> Any:
    """``config[key]`` as an int or float; a missing/null key takes ``default``; anything else is refused."""
    value = config.get(key)
    if value is None:
        value = default
    if value is None:
        raise CheckpointError(f"config.json is missing {key!r}")
    exact = isinstance(value, int) or (kind is float and isinstance(value, float))
    if isinstance(value, bool) or not exact:
        raise CheckpointError(
            f"config.json: {key} must be {'an integer' if kind is int else 'a number'}, got {value!r}"
        )
    return kind(value)


def rope_settings(config: dict[str, Any], layer_type: str) -> tuple[float, dict[str, Any] | None]:
    """The rope base and scaling dict of ``layer_type``'s layers (None: the default rope).

    Reads transformers 5's ``rope_parameters`` (flat, or one entry per layer
    type) and the older ``rope_theta`` / ``rope_scaling`` (with Gemma 3's
    ``rope_local_base_freq`` for its sliding layers).
    """
    params = config.get("rope_parameters") or {}
    for key, value in (("rope_parameters", params), ("rope_scaling", config.get("rope_scaling") or {})):
        if not isinstance(value, dict):
            raise CheckpointError(f"config.json: {key} must be an object, got {value!r}")
    if isinstance(params.get(layer_type), dict):
        params = params[layer_type]
    elif any(isinstance(v, dict) for v in params.values()):
        params = next(v for v in params.values() if isinstance(v, dict))
    old = config.get("rope_scaling") or {}
    local = layer_type == "sliding_attention" and config.get("rope_local_base_freq")
    theta = float(local or params.get("rope_theta") or config.get("rope_theta") or 10000.0)
    scaling = dict(old) if old and not local else {k: v for k, v in params.items() if k != "rope_theta"}
    scaling.pop("partial_rotary_factor", None)
    kind = rope_type(scaling)
    if kind == "default":
        return theta, None
    max_positions = int(config.get("max_position_embeddings", 2048))
    original = scaling.get("original_max_position_embeddings") or config.get(
        "original_max_position_embeddings"
    )
    scaling["original_max_position_embeddings"] = int(original or max_positions)
    if scaling.get("factor") is None and kind in ("longrope", "yarn"):
        scaling["factor"] = max_positions / scaling["original_max_position_embeddings"]
    return theta, scaling


def _refuse_unsupported(config: dict[str, Any], family: str) -> None:
    """Features the step graph does not build, named instead of silently ignored."""
    if isinstance(config.get("text_config"), dict) and "num_hidden_layers" not in config:
        raise CheckpointError(
            f"{family} here is a multimodal checkpoint (its config has a text_config): "
            "only text checkpoints are exported"
        )
    act = config.get("hidden_activation") or config.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise CheckpointError(f"hidden_act {act!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    if config.get("mlp_bias"):
        raise CheckpointError("mlp_bias is not supported")


def _llama_layout(arch: Architecture, loaders: dict) -> dict:
    """Phi-3's fused projections split, Gemma's norm weights shifted (see ``readers.layouts``)."""
    if arch.family in SHIFTED_NORM_FAMILIES:
        return {n: shifted_norm(f) if n.endswith("norm.weight") else f for n, f in loaders.items()}
    if arch.family != "phi3":
        return loaders
    q, kv = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    out = {}
    for name, load in loaders.items():
        prefix = name.rsplit(".", 3)[0]
        attn, mlp = fused_phi3_names(prefix)
        if name.endswith(".self_attn.qkv_proj.weight"):
            out.update(row_slices(load, attn, (q, kv, kv), name))
        elif name.endswith(".mlp.gate_up_proj.weight"):
            size = arch.intermediate_size
            out.update(row_slices(load, mlp, (size, size), name))
        else:
            out[name] = load
    return out


def folder_sha256(folder: str | Path) -> str:
    """A digest of the folder's defining files: sha256 over ``name sha256`` lines, sorted."""
    folder = Path(folder)
    names = sorted(
        {p.name for p in folder.glob("*.safetensors")} | {n for n in _HASHED if (folder / n).is_file()}
    )
    lines = "".join(f"{name} {file_sha256(folder / name)}\n" for name in names)
    return hashlib.sha256(lines.encode()).hexdigest()


def _weights(folder: Path) -> dict:
    index = folder / INDEX_FILE
    if index.is_file():
        weight_map = _json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{INDEX_FILE} has no weight_map")
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder.name} has no *.safetensors weights (.bin checkpoints are not read)")
    loaders: dict = {}
    for name in files:
        if not (folder / name).exists():
            raise CheckpointError(f"weight shard {name} named by {INDEX_FILE} is missing")
        loaders.update(tensor_loaders(folder / name))
    return loaders


def _tokenizer_json(folder: Path) -> str:
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{folder.name} has no tokenizer.json (only fast tokenizers are supported)")
    text = path.read_text(encoding="utf-8")
    try:
        Tokenizer.from_str(text)
    except Exception as exc:  # the tokenizers library raises its own exception type
        raise CheckpointError(f"tokenizer.json cannot be loaded: {exc}") from None
    return text


def _chat_template(folder: Path, tok_config: dict[str, Any]) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = tok_config.get("chat_template") or _json(folder / "chat_template.json", required=False).get(
        "chat_template"
    )
    if isinstance(template, list):
        # Several named templates: the one named "default" is what apply_chat_template uses.
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) and template else None


def _generation_defaults(generation: dict[str, Any]) -> dict[str, Any]:
    defaults = {k: generation[k] for k in _GENERATION_KEYS if generation.get(k) is not None}
    if generation.get("do_sample") is False:
        # Greedy by default: sampling knobs in the file do not apply.
        defaults = {k: v for k, v in defaults.items() if k in ("repetition_penalty", "max_new_tokens")}
        defaults["temperature"] = 0.0
    return defaults


def _eos_ids(
    config: dict[str, Any], generation: dict[str, Any], tokenizer: Tokenizer, eos_token: str | None
) -> tuple[int, ...]:
    ids: list[int] = []
    for value in (generation.get("eos_token_id"), config.get("eos_token_id"), _id(tokenizer, eos_token)):
        for token_id in value if isinstance(value, list) else [value]:
            if token_id is not None and _token_id(token_id, "eos_token_id") not in ids:
                ids.append(token_id)
    return tuple(ids)


def _add_bos(tok_config: dict[str, Any], tokenizer: Tokenizer, bos_id: int | None) -> bool:
    if "add_bos_token" in tok_config:
        return bool(tok_config["add_bos_token"])
    if bos_id is None:
        return False
    encoded = tokenizer.encode("a", add_special_tokens=True).ids
    return bool(encoded) and encoded[0] == bos_id


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json writes special tokens as a string or as an AddedToken dict.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _id(tokenizer: Tokenizer, token: str | None) -> int | None:
    return tokenizer.token_to_id(token) if token else None


def _token(tokenizer: Tokenizer, token_id: int | None) -> str | None:
    return tokenizer.id_to_token(token_id) if token_id is not None else None


def _first(*values: Any, key: str = "bos_token_id") -> int | None:
    for value in values:
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            return _token_id(value, key)
    return None


def _token_id(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"{key} must be a token id (an integer >= 0), got {value!r}")
    return value


def _json(path: Path, *, required: bool = True) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path.name} is missing")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path.name} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path.name} does not hold a JSON object")
    return data
