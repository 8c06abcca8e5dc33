"""Model files from disk, fuzzed: GGUF, safetensors headers, Hugging Face config and tokenizer
files, the model folder's manifest and a conversation's KV file.

Each is untrusted (downloaded, or left by another process). Property: a valid
result, or the reader's documented error (CheckpointError, ManifestError,
KVFileError: all ValueErrors naming the problem); never another exception,
and nothing read past what the file holds.
"""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from fuzz_budget import budget, count
from hypothesis import given
from hypothesis import strategies as st

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf import read_gguf
from clika_export.readers.gguf_file import GGUFFile
from clika_export.readers.hf import read_hf
from clika_export.readers.safetensors_file import read_header, tensor_loaders
from clika_runtime.contract.manifest import Manifest, ManifestError
from clika_runtime.engine.kv.kv_file import KVFileError, KVLayout, read_kv_file, write_kv_file
from clika_runtime.engine.kv.kv_snapshot import KVSnapshot

SCRATCH = Path(tempfile.mkdtemp(prefix="clika-fuzz-"))

# -- GGUF -------------------------------------------------------------------------------------

_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
LLAMA_KEYS = [
    "general.architecture", "general.alignment", "llama.block_count", "llama.context_length",
    "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
    "llama.attention.head_count_kv", "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon",
    "llama.vocab_size", "tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "llama.rope.dimension_count",
]  # fmt: skip
TENSOR_NAMES = ["token_embd.weight", "output_norm.weight", "blk.0.attn_q.weight", "output.weight", "x"]


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


@st.composite
def gguf_value(draw, depth: int = 0) -> tuple[int, bytes]:
    kind = draw(st.sampled_from([*_SCALARS, 8, 9] if depth < 2 else [*_SCALARS, 8]))
    if kind == 8:
        return kind, _string(draw(st.sampled_from([b"llama", b"gpt2", b"qwen2"]) | st.binary(max_size=12)))
    if kind == 9:
        item = draw(st.sampled_from([*_SCALARS, 8]))
        items = [
            draw(gguf_value(depth + 1).filter(lambda v, k=item: v[0] == k))
            for _ in range(draw(st.integers(0, 4)))
        ]
        length = draw(st.sampled_from([len(items)] * 4 + [len(items) + 1, 2**40]))
        return kind, struct.pack("<IQ", item, length) + b"".join(body for _, body in items)
    fmt = _SCALARS[kind]
    if fmt == "<?":
        return kind, struct.pack(fmt, draw(st.booleans()))
    if fmt in ("<f", "<d"):
        return kind, struct.pack(fmt, draw(st.floats(width=32 if fmt == "<f" else 64)))
    bits = struct.calcsize(fmt) * 8
    low, high = (0, 2**bits - 1) if fmt[1].isupper() else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return kind, struct.pack(fmt, draw(st.integers(low, high) | st.sampled_from([low, high, 0, 1, 32])))


@st.composite
def gguf_files(draw) -> bytes:
    version = draw(st.sampled_from([3, 3, 3, 2, 1, 0x03000000]))
    kvs = []
    for _ in range(draw(st.integers(0, 10))):
        key = draw(st.sampled_from(LLAMA_KEYS) | st.text(max_size=8).map(str))
        kind, body = draw(gguf_value())
        kvs.append(_string(key.encode()) + struct.pack("<I", kind if draw(st.integers(0, 30)) else 99) + body)
    tensors, payload = [], b""
    for _ in range(draw(st.integers(0, 4))):
        dims = draw(st.lists(st.sampled_from([1, 2, 4, 32, 64, 0, 2**40]), min_size=1, max_size=3))
        ggml_type = draw(st.sampled_from([0, 1, 2, 8, 12, 14, 99]))  # F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, bad
        offset = draw(st.sampled_from([len(payload), 0, 7, 2**50]))
        name = draw(st.sampled_from(TENSOR_NAMES)).encode()
        tensors.append(_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                       + struct.pack("<IQ", ggml_type, offset))  # fmt: skip
        payload += draw(st.binary(min_size=0, max_size=300))
    counts = struct.pack(
        "<QQ", draw(st.sampled_from([len(tensors)] * 5 + [len(tensors) + 1, 2**62])), len(kvs)
    )
    head = b"GGUF" + struct.pack("<I", version) + counts + b"".join(kvs) + b"".join(tensors)
    head += b"\0" * (-len(head) % 32)
    data = head + payload
    cut = draw(st.sampled_from([len(data)] * 6 + [len(data) // 2, 3, 24]))
    return data[:cut]


@given(data=gguf_files())
@budget(1200)
def test_gguf_files_parse_or_are_a_checkpoint_error(data):
    count("GGUF reader (header, metadata, tensor infos, blocks)")
    path = SCRATCH / "fuzz.gguf"
    path.write_bytes(data)
    try:
        parsed = GGUFFile(path)
        for info in parsed.tensors.values():
            parsed.data(info)  # a view inside the file: the reader checked offsets and sizes
    except CheckpointError as error:
        assert str(error)
        return
    try:
        checkpoint = read_gguf(path)
        for name in list(checkpoint.tensor_loaders)[:4]:
            checkpoint.tensor_loaders[name]()  # block payloads dequantized
    except CheckpointError as error:
        assert str(error)


# -- safetensors ----------------------------------------------------------------------------------

entries = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F32", "F16", "BF16", "I8", "U8", "F64", "X", 3]),
        "shape": st.lists(st.integers(-1, 70) | st.sampled_from([2**40, 2**64]), max_size=3) | st.text(max_size=3),
        "data_offsets": st.lists(st.integers(-1, 600) | st.sampled_from([2**63]), min_size=0, max_size=3),
    }
)  # fmt: skip
headers = st.dictionaries(
    st.text(max_size=6) | st.just("__metadata__"), entries | st.integers() | st.none(), max_size=4
)


@given(header=headers | st.lists(st.integers(), max_size=2), raw=st.none() | st.binary(max_size=40),
       body=st.binary(max_size=600), declared=st.none() | st.sampled_from([0, 7, 2**64 - 1, 10**9]))  # fmt: skip
@budget(1200)
def test_safetensors_headers_read_or_are_a_checkpoint_error(header, raw, body, declared):
    count("safetensors header")
    text = raw if raw is not None else json.dumps(header).encode()
    size = len(text) if declared is None else declared
    path = SCRATCH / "fuzz.safetensors"
    path.write_bytes(struct.pack("<Q", size) + text + body)
    try:
        table, start = read_header(path)
        for load in tensor_loaders(path).values():
            array = load()
            assert isinstance(array, np.ndarray)
    except CheckpointError as error:
        assert str(error)
        return
    assert start == 8 + size and isinstance(table, dict)


# -- Hugging Face folders -------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**66), 2**66) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def _mutated(document: dict, draw) -> dict:
    """``document`` with a few keys set to other JSON values, deleted or added."""
    changed = dict(document)
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(sorted(changed)) | st.text(max_size=6)) if changed else "x"
        if draw(st.booleans()) and key in changed:
            del changed[key]
        else:
            changed[key] = draw(json_values)
    return changed


@pytest.fixture(scope="module")
def hf_folder(tiny_llama_hf):
    folder = SCRATCH / "hf"
    shutil.copytree(tiny_llama_hf, folder, dirs_exist_ok=True)
    return folder


@given(data=st.data())
@budget(400)
def test_hf_config_and_tokenizer_files_read_or_are_a_checkpoint_error(hf_folder, tiny_llama_hf, data):
    count("HF config and tokenizer files")
    name = data.draw(
        st.sampled_from(["config.json", "tokenizer_config.json", "generation_config.json", "tokenizer.json"])
    )
    original = tiny_llama_hf / name
    if not original.exists():
        return
    document = json.loads(original.read_text())
    if data.draw(st.booleans()):
        text = json.dumps(_mutated(document, data.draw))
    else:
        raw = original.read_text()
        cut = data.draw(st.integers(0, len(raw)))
        text = raw[:cut] + data.draw(st.text(max_size=4)) + raw[cut + 1 :]
    (hf_folder / name).write_text(text)
    try:
        read_hf(hf_folder)
    except CheckpointError as error:
        assert str(error)
    finally:
        shutil.copy(original, hf_folder / name)


# -- the manifest ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def manifest_document(tiny_llama_model):
    return json.loads((tiny_llama_model / "manifest.json").read_text())


@given(data=st.data())
@budget(1200)
def test_manifests_read_or_are_a_manifest_error(manifest_document, data):
    count("manifest")
    document = json.loads(json.dumps(manifest_document))
    for _ in range(data.draw(st.integers(1, 4))):
        node, path = document, []
        while isinstance(node, dict) and node and data.draw(st.booleans()):
            key = data.draw(st.sampled_from(sorted(node)))
            if not isinstance(node[key], dict):
                break
            path.append(key)
            node = node[key]
        if isinstance(node, dict) and node:
            key = data.draw(st.sampled_from(sorted(node)))
            if data.draw(st.integers(0, 3)) == 0:
                del node[key]
            else:
                node[key] = data.draw(json_values)
    try:
        manifest = Manifest.from_dict(document)
    except ManifestError as error:
        assert str(error)
        return
    assert isinstance(manifest, Manifest)


# -- the KV file ----------------------------------------------------------------------------------

LAYOUT = KVLayout("model-a", "float32", num_layers=2, num_kv_heads=2, head_dim=4, max_tokens=16)


def _kv_file(tokens: int) -> bytes:
    rng = np.random.default_rng(tokens)
    layers = [rng.standard_normal((2, tokens, 4)).astype(np.float32) for _ in range(2)]
    snapshot = KVSnapshot(tuple(range(tokens)), layers, [layer + 1 for layer in layers])
    return write_kv_file(SCRATCH / "seed.kv", snapshot, LAYOUT).read_bytes()


KV_SEEDS = [_kv_file(tokens) for tokens in (1, 3)]


@given(data=st.data())
@budget(1200)
def test_kv_files_read_or_are_a_kv_file_error(data):
    count("KV file")
    raw = bytearray(data.draw(st.sampled_from(KV_SEEDS)))
    (length,) = struct.unpack("<I", raw[8:12]) if len(raw) >= 12 else (0,)
    if data.draw(st.booleans()):  # a header edited (its framing kept)
        header = json.loads(raw[12 : 12 + length])
        header = _mutated(header, data.draw)
        encoded = json.dumps(header).encode()
        raw = raw[:8] + struct.pack("<I", len(encoded)) + encoded + raw[12 + length :]
    else:  # bytes changed or cut anywhere
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(0, len(raw) - 1))
            if data.draw(st.booleans()):
                raw[at] = data.draw(st.integers(0, 255))
            else:
                del raw[at:]
                break
    path = SCRATCH / "fuzz.kv"
    path.write_bytes(bytes(raw))
    try:
        snapshot = read_kv_file(path, LAYOUT)
    except KVFileError as error:
        assert str(error)
        return
    assert snapshot.num_tokens <= LAYOUT.max_tokens
    assert all(k.shape == (2, snapshot.num_tokens, 4) for k in snapshot.keys)
