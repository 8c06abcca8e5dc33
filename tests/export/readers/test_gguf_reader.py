"""GGUF reader: tiny synthetic files for structure and errors; the real models against transformers."""

from __future__ import annotations

import hashlib
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType
from gguf.quants import dequantize
from support.gguf_references import reference_model
from support.reference_answers import ReferenceAnswers

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf import read_gguf

# -- tiny synthetic files -----------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_tiny_file_reads_back_every_tensor_in_hf_layout(tiny_gguf, family):
    tiny = tiny_gguf(family=family, tie=family == "llama")
    ckpt = read_gguf(tiny.path)
    assert set(ckpt.names()) == set(tiny.weights)
    for name, expected in tiny.weights.items():
        got = ckpt.tensor(name)
        assert got.dtype == np.float32 and got.shape == expected.shape, name
        assert np.array_equal(got, expected), name  # q/k un-permuted for llama, untouched for qwen2


def test_tiny_architecture_and_provenance(tiny_gguf):
    tiny = tiny_gguf(family="qwen2", tie=False, layers=3, hidden=64, heads=4, kv_heads=1, ffn=96)
    ckpt = read_gguf(tiny.path)
    arch = ckpt.architecture
    assert (arch.family, arch.num_layers, arch.hidden_size) == ("qwen2", 3, 64)
    assert (arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.intermediate_size) == (4, 1, 16, 96)
    assert arch.vocab_size == len(tiny.tokens)
    assert arch.rms_norm_eps == 1e-5 and arch.rope_theta == 10000.0 and arch.max_position_embeddings == 256
    assert arch.attention_bias and not arch.tie_word_embeddings and arch.rope_scaling is None
    assert ckpt.source_name == "tiny.gguf" and ckpt.source_format == "gguf"
    assert ckpt.source_sha256 == hashlib.sha256(tiny.path.read_bytes()).hexdigest()
    assert ckpt.generation_defaults == {}


def test_tied_embeddings_when_there_is_no_output_tensor(tiny_gguf):
    ckpt = read_gguf(tiny_gguf(tie=True).path)
    assert ckpt.architecture.tie_word_embeddings and not ckpt.has("lm_head.weight")


def test_rope_scaling_is_carried(tiny_gguf):
    metadata = {
        "llama.rope.scaling.type": ("linear", GGUFValueType.STRING),
        "llama.rope.scaling.factor": (4.0, GGUFValueType.FLOAT32),
    }
    ckpt = read_gguf(tiny_gguf(metadata=metadata).path)
    assert ckpt.architecture.rope_scaling == {"rope_type": "linear", "factor": 4.0}


def test_raw_blocks_are_the_file_bytes_in_hf_row_order(tiny_gguf):
    tiny = tiny_gguf(family="llama", weight_type="Q4_0", heads=4, kv_heads=2)
    ckpt = read_gguf(tiny.path)
    assert not ckpt.raw_loaders.keys() & {"model.norm.weight", "model.layers.0.input_layernorm.weight"}
    for name in ("model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight"):
        raw = ckpt.raw(name)
        assert raw.ggml_type == "Q4_0" and raw.data.dtype == np.uint8
        assert raw.shape == tiny.weights[name].shape
        assert raw.data.shape == (raw.shape[0], raw.shape[1] // 32 * 18)
        # The raw rows are permuted exactly like the float ones: they dequantize to the same matrix.
        assert np.array_equal(dequantize(raw.data, _qtype("Q4_0")), tiny.weights[name])


def _qtype(name: str):
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType[name]


# -- bad input -------------------------------------------------------------------


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 definitely a zip")
    with pytest.raises(CheckpointError, match="model.gguf: not a GGUF file"):
        read_gguf(path)


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="absent.gguf: no such GGUF file"):
        read_gguf(tmp_path / "absent.gguf")


@pytest.mark.parametrize("keep_fraction", [0.02, 0.5, 0.999])
def test_truncated_file(tiny_gguf, keep_fraction):
    path = tiny_gguf().path
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep_fraction)])
    with pytest.raises(CheckpointError, match="truncated"):
        read_gguf(path)


def test_unknown_tensor_type(tiny_gguf):
    path = tiny_gguf().path
    _patch_tensor_type(path, b"output_norm.weight", 4242)
    with pytest.raises(CheckpointError, match="tensor 'output_norm.weight' has unknown tensor type 4242"):
        read_gguf(path)


def test_tensor_type_the_reader_does_not_dequantize(tiny_gguf):
    path = tiny_gguf().path
    _patch_tensor_type(path, b"output_norm.weight", 26)  # I32: a valid ggml type, not a weight type
    with pytest.raises(CheckpointError, match="tensor output_norm.weight has tensor type I32"):
        read_gguf(path)


def _patch_tensor_type(path: Path, name: bytes, new_type: int) -> None:
    """Overwrite one tensor's type field in the tensor table (name, n_dims, dims, type, offset)."""
    data = bytearray(path.read_bytes())
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    (n_dims,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, new_type)
    path.write_bytes(bytes(data))


def test_tensor_shape_disagreeing_with_metadata(tiny_gguf):
    path = tiny_gguf(ffn=96, metadata={"llama.feed_forward_length": (128, GGUFValueType.UINT32)}).path
    with pytest.raises(CheckpointError, match=r"blk\.0\.ffn_\w+\.weight has shape .* the metadata implies"):
        read_gguf(path)


def test_missing_tensor(tiny_gguf):
    path = tiny_gguf(drop_tensors=("blk.1.ffn_up.weight",)).path
    with pytest.raises(CheckpointError, match=r"missing tensor model\.layers\.1\.mlp\.up_proj\.weight"):
        read_gguf(path)


def test_unsupported_family_names_itself_and_the_supported_ones(tiny_gguf):
    metadata = {"general.architecture": ("falcon", GGUFValueType.STRING)}
    path = tiny_gguf(metadata=metadata).path
    supported = "gemma2, gemma3, granite, llama, olmo2, phi3, qwen2, qwen2vl, qwen3, smollm3"
    with pytest.raises(
        CheckpointError, match=f"family 'falcon' is not supported; supported families: {supported}"
    ):
        read_gguf(path)


def test_metadata_of_the_wrong_type(tiny_gguf):
    path = tiny_gguf(metadata={"llama.block_count": ("30", GGUFValueType.STRING)}).path
    with pytest.raises(CheckpointError, match="'llama.block_count' should be an integer, found string"):
        read_gguf(path)


def test_implausible_metadata_value(tiny_gguf):
    path = tiny_gguf(metadata={"llama.attention.head_count": (1 << 20, GGUFValueType.UINT32)}).path
    with pytest.raises(
        CheckpointError, match="'llama.attention.head_count' is 1048576, outside the plausible range"
    ):
        read_gguf(path)


def test_missing_required_metadata(tiny_gguf):
    path = tiny_gguf(metadata={"llama.embedding_length": None}).path
    with pytest.raises(CheckpointError, match="lacks the required key 'llama.embedding_length'"):
        read_gguf(path)


def test_huge_header_counts_are_refused_before_parsing(tiny_gguf):
    path = tiny_gguf().path
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, 8, 1 << 60)  # tensor count
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="implausible GGUF header"):
        read_gguf(path)


# -- the real models against transformers -------------------------------------------


CONFIG_FIELDS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
    "rms_norm_eps",
)


def _digest(values: np.ndarray) -> str:
    """The sha256 of an array's float32 values, +0.0 for -0.0 (equal digests: equal values)."""
    return hashlib.sha256(
        np.ascontiguousarray(values.astype(np.float32) + np.float32(0.0)).tobytes()
    ).hexdigest()


def _transformers_state_dict(gguf_path: Path) -> dict:
    """Per tensor of transformers' state dict its shape and value digest, and the config's fields
    (kept in the test cache: only a miss loads transformers' model)."""

    def compute() -> dict:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
        model = reference_model(gguf_path)
        tensors = {name: t.detach().numpy() for name, t in model.state_dict().items()}
        return {
            "tensors": {name: [list(t.shape), _digest(t)] for name, t in tensors.items()},
            "config": {field: getattr(model.config, field) for field in CONFIG_FIELDS},
        }

    return ReferenceAnswers(gguf_path).recall_json("state-dict-digests", [], compute)


def _assert_matches_transformers(gguf_path: Path) -> None:
    ckpt = read_gguf(gguf_path)
    answer = _transformers_state_dict(gguf_path)
    reference, config = answer["tensors"], answer["config"]
    arch = ckpt.architecture
    expected_names = set(reference)
    if arch.tie_word_embeddings:
        expected_names.discard("lm_head.weight")  # tied: the same tensor as the embedding
        assert reference["lm_head.weight"] == reference["model.embed_tokens.weight"]
    assert set(ckpt.names()) == expected_names
    for name in sorted(expected_names):
        ours = ckpt.tensor(name)
        assert ours.dtype == np.float32, name
        assert not np.isnan(ours).any(), f"{name} holds NaN"  # equal digests would not catch NaN != NaN
        assert [list(ours.shape), _digest(ours)] == reference[name], f"{name} differs from transformers"
    assert (arch.num_layers, arch.hidden_size) == (config["num_hidden_layers"], config["hidden_size"])
    assert (arch.num_heads, arch.num_kv_heads) == (
        config["num_attention_heads"],
        config["num_key_value_heads"],
    )
    assert (arch.intermediate_size, arch.vocab_size) == (config["intermediate_size"], config["vocab_size"])
    assert arch.tie_word_embeddings == config["tie_word_embeddings"]
    assert arch.max_position_embeddings == config["max_position_embeddings"]
    assert arch.rms_norm_eps == pytest.approx(config["rms_norm_eps"], rel=1e-6)


@pytest.mark.slow
def test_smollm2_matches_transformers_exactly(smollm2_gguf):
    _assert_matches_transformers(smollm2_gguf)
    ckpt = read_gguf(smollm2_gguf)
    arch = ckpt.architecture
    assert (arch.family, arch.num_layers, arch.num_heads, arch.num_kv_heads, arch.head_dim) == (
        "llama",
        30,
        9,
        3,
        64,
    )
    assert arch.tie_word_embeddings and arch.vocab_size == 49152
    assert ckpt.source_name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert ckpt.source_sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    # Raw Q4_1 blocks carry the same un-permutation as the float tensor.
    name = "model.layers.3.self_attn.q_proj.weight"
    raw = ckpt.raw(name)
    assert raw.ggml_type == "Q4_1"
    assert np.array_equal(dequantize(raw.data, _qtype("Q4_1")), ckpt.tensor(name))


@pytest.mark.slow
def test_qwen05_matches_transformers_exactly(qwen05_gguf):
    _assert_matches_transformers(qwen05_gguf)
    arch = read_gguf(qwen05_gguf).architecture
    assert (arch.family, arch.num_layers, arch.attention_bias, arch.tie_word_embeddings) == (
        "qwen2",
        24,
        True,
        False,
    )


@pytest.mark.slow
def test_truncated_copy_of_a_real_model(smollm2_gguf, tmp_path):
    copy = tmp_path / "cut.gguf"
    with open(smollm2_gguf, "rb") as src, open(copy, "wb") as dst:
        shutil.copyfileobj(src, dst)
        dst.truncate(smollm2_gguf.stat().st_size - 1000)
    with pytest.raises(CheckpointError, match="cut.gguf: GGUF file is truncated: tensor"):
        read_gguf(copy)
