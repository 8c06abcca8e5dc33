"""llama.cpp's two files of a vision model, written from a tiny transformers checkpoint.

``write_idefics3_mmproj`` / ``write_qwen2_vl_mmproj`` lay out the tower the way
llama.cpp's converter writes an ``mmproj`` GGUF (``v.*`` encoder, ``mm.*``
projector, ``clip.vision.*`` metadata); ``write_text_gguf`` writes the text
model as its converter does (llama's Q/K rows permuted, Qwen2-VL's M-RoPE
sections padded to four, the tokenizer and chat template in the metadata).
Tensors are float32 unless asked otherwise, so the pair carries the
checkpoint's exact values.
"""

from __future__ import annotations

import gguf
import numpy as np
from vision_helpers import (
    IDEFICS3_PROCESSOR,
    IDEFICS3_TEMPLATE,
    QWEN2_VL_TEMPLATE,
    build_idefics3_chat,
    build_qwen2_vl_chat,
    idefics3_tokenizer,
    qwen2_vl_tokenizer,
)

from clika_export.media import mmproj_idefics3, mmproj_qwen2_vl

# The mean and std Qwen2-VL checkpoints normalize with (OpenAI CLIP's).
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
_VISION_PREFIX = "model.vision_model."


def _finish(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_idefics3_mmproj(model, path, *, matrices=np.float32, projector="idefics3", drop=None):
    """An Idefics3 mmproj: ``matrices`` the 2-D weights' type, ``drop`` a GGUF tensor to leave out."""
    config = model.config
    vision = config.vision_config
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("clip.projector_type", projector)
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_uint32("clip.vision.image_size", vision.image_size)
    writer.add_uint32("clip.vision.patch_size", vision.patch_size)
    writer.add_uint32("clip.vision.embedding_length", vision.hidden_size)
    writer.add_uint32("clip.vision.feed_forward_length", vision.intermediate_size)
    writer.add_uint32("clip.vision.block_count", vision.num_hidden_layers)
    writer.add_uint32("clip.vision.attention.head_count", vision.num_attention_heads)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", vision.layer_norm_eps)
    writer.add_uint32("clip.vision.projection_dim", config.text_config.hidden_size)
    writer.add_uint32("clip.vision.projector.scale_factor", config.scale_factor)
    writer.add_uint32("clip.vision.preproc_image_size", IDEFICS3_PROCESSOR["size"]["longest_edge"])
    writer.add_array("clip.vision.image_mean", IDEFICS3_PROCESSOR["image_mean"])
    writer.add_array("clip.vision.image_std", IDEFICS3_PROCESSOR["image_std"])
    writer.add_bool("clip.use_gelu", True)
    for name, tensor in model.state_dict().items():
        if "text_model" in name or name == "lm_head.weight":
            continue
        relative = (
            name[len(_VISION_PREFIX) :] if name.startswith(_VISION_PREFIX) else name.removeprefix("model.")
        )
        target = mmproj_idefics3.gguf_name(relative)
        if target == drop:
            continue
        values = tensor.numpy()
        # As llama.cpp's converter: embeddings and 1-D tensors in F32, matrices at the chosen type.
        dtype = matrices if values.ndim == 2 and "embd" not in target else np.float32
        writer.add_tensor(target, values.astype(dtype))
    _finish(writer)
    return path


def write_qwen2_vl_mmproj(model, path):
    """As llama.cpp's converter: Conv3d split per frame, qkv split, merger under v.post_ln / mm.*."""
    vision = model.config.vision_config
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("clip.projector_type", "qwen2vl_merger")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_uint32("clip.vision.image_size", 560)
    writer.add_uint32("clip.vision.patch_size", vision.patch_size)
    writer.add_uint32("clip.vision.embedding_length", vision.embed_dim)
    writer.add_uint32("clip.vision.feed_forward_length", vision.hidden_size)  # the converter's own quirk
    writer.add_uint32("clip.vision.block_count", vision.depth)
    writer.add_uint32("clip.vision.attention.head_count", vision.num_heads)
    writer.add_uint32("clip.vision.projection_dim", vision.hidden_size)
    writer.add_array("clip.vision.image_mean", CLIP_MEAN)
    writer.add_array("clip.vision.image_std", CLIP_STD)
    for name, tensor in model.state_dict().items():
        if not name.startswith("model.visual."):
            continue
        relative, values = name[len("model.visual.") :], tensor.numpy()
        if relative == "patch_embed.proj.weight":
            writer.add_tensor("v.patch_embd.weight", np.ascontiguousarray(values[:, :, 0]))
            writer.add_tensor("v.patch_embd.weight.1", np.ascontiguousarray(values[:, :, 1]))
        elif ".attn.qkv." in relative:
            block, leaf = relative.split(".")[1], relative.rsplit(".", 1)[1]
            for part, chunk in zip("qkv", np.split(values, 3, axis=0), strict=True):
                writer.add_tensor(f"v.blk.{block}.attn_{part}.{leaf}", np.ascontiguousarray(chunk))
        else:
            writer.add_tensor(mmproj_qwen2_vl.gguf_name(relative), values)
    _finish(writer)
    return path


# -- the text model ------------------------------------------------------------------

_TEXT_PREFIXES = ("model.text_model.", "model.language_model.")
_LAYER_PARTS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_GLOBALS = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
# A merge nothing in the tests spells (two NUL bytes): the GGUF's BPE needs one.
_NUL = "Ā"


def _text_name(relative: str) -> str:
    if relative in _GLOBALS:
        return _GLOBALS[relative]
    _, layer, rest = relative.split(".", 2)
    module, leaf = rest.rsplit(".", 1)
    return f"blk.{layer}.{_LAYER_PARTS[module]}.{leaf}"


def _llama_cpp_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter permutation of llama's Q/K rows (the reader undoes it)."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _vocabulary(tokenizer) -> tuple[list[str], list[int], list[str]]:
    """The tokens by id (the last unused one made the merge of two NULs), their types, the merge."""
    size = tokenizer.get_vocab_size()
    tokens = [tokenizer.id_to_token(i) for i in range(size)]
    specials = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    spare = max(i for i, token in enumerate(tokens) if token.startswith("<unused_"))
    tokens[spare] = _NUL + _NUL
    types = [3 if token in specials else 1 for token in tokens]
    return tokens, types, [f"{_NUL} {_NUL}"]


def write_text_gguf(
    model, path, tokenizer, *, arch: str, template: str, eos: str, bos: str | None = None, sections=None
):
    """The text half of ``model`` (a transformers Idefics3 / Qwen2-VL) as llama.cpp's ``arch`` GGUF
    (``sections``: other M-RoPE sections to write than the checkpoint's, a broken file)."""
    cfg = model.config.text_config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_dimension_count(head_dim)
    rope = getattr(cfg, "rope_parameters", None) or {}
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    if arch == "qwen2vl":
        writer.add_rope_dimension_sections(sections or [*rope["mrope_section"], 0])
    tokens, types, merges = _vocabulary(tokenizer)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(tokens.index(eos))
    if bos is not None:
        writer.add_bos_token_id(tokens.index(bos))
    writer.add_add_bos_token(False)
    writer.add_chat_template(template)
    for name, tensor in model.state_dict().items():
        values = tensor.detach().float().numpy()
        if name == "lm_head.weight":
            if not model.config.tie_word_embeddings:
                writer.add_tensor("output.weight", values)
            continue
        prefix = next((p for p in _TEXT_PREFIXES if name.startswith(p)), None)
        if prefix is None:
            continue
        relative = name[len(prefix) :]
        if arch == "llama" and (".q_proj." in relative or ".k_proj." in relative):
            heads = cfg.num_attention_heads if ".q_proj." in relative else cfg.num_key_value_heads
            values = _llama_cpp_permute(values, heads)
        writer.add_tensor(_text_name(relative), np.ascontiguousarray(values, dtype=np.float32))
    _finish(writer)
    return path


# -- both files of a tiny model --------------------------------------------------------


def write_idefics3_pair(root):
    """A tiny SmolVLM (``build_idefics3_chat``) and its pair: (model, HF folder, text GGUF, mmproj)."""
    model, hf = build_idefics3_chat(root / "hf")
    text = write_text_gguf(
        model, root / "SmolVLM-tiny-F32.gguf", idefics3_tokenizer(), arch="llama",
        template=IDEFICS3_TEMPLATE, eos="<end_of_utterance>", bos="<|im_start|>",
    )  # fmt: skip
    return model, hf, text, write_idefics3_mmproj(model, root / "mmproj-SmolVLM-tiny-F32.gguf")


def write_qwen2_vl_pair(root):
    """A tiny Qwen2-VL (``build_qwen2_vl_chat``) and its pair: (model, HF folder, text GGUF, mmproj)."""
    model, hf = build_qwen2_vl_chat(root / "hf")
    text = write_text_gguf(
        model, root / "Qwen2-VL-tiny-F32.gguf", qwen2_vl_tokenizer(), arch="qwen2vl",
        template=QWEN2_VL_TEMPLATE, eos="<|im_end|>",
    )  # fmt: skip
    return model, hf, text, write_qwen2_vl_mmproj(model, root / "mmproj-Qwen2-VL-tiny-F32.gguf")
