"""Write a plain Hugging Face checkpoint (fp32 safetensors) of a GGUF model.

The onnxruntime-genai model builder reads Hugging Face folders, not GGUF files,
so the peers' ONNX model starts from this folder. transformers dequantizes
every GGUF tensor while loading (``gguf_file=``), so the fp32 weights here are
exactly the values llama.cpp computes with.

    python peer_hf_checkpoint.py MODEL.gguf OUT_DIR

Runs in the peers' environment (needs torch, transformers, gguf).
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig


def gguf_string(path: Path, key: str) -> str | None:
    field = GGUFReader(str(path)).fields.get(key)
    return field.contents() if field is not None else None


def plain_fp32_model(gguf: Path):
    """The GGUF's model as an ordinary float model that save_pretrained accepts."""
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    # A GGUF-loaded model carries a gguf quantization_config and transformers refuses
    # to serialize it, although every tensor is already float: rebuild without it.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict({k: v.float() for k, v in loaded.state_dict().items()}, strict=True)
    return model.eval()


def fix_tokenizer_config(out: Path, template: str) -> None:
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    model_cfg = json.loads((out / "config.json").read_text())
    cfg["model_max_length"] = model_cfg.get("max_position_embeddings", cfg.get("model_max_length"))
    cfg["chat_template"] = template  # older loaders read it only from here
    # transformers 5 names its own backend class, which older loaders (the genai
    # builder's tokenizer export among them) do not know; the tokenizer is byte-level BPE.
    cfg["tokenizer_class"] = "GPT2Tokenizer"
    for stale in ("backend", "is_local", "local_files_only"):
        cfg.pop(stale, None)
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))


def add_top_level_rope_theta(out: Path) -> None:
    """transformers 5 writes rope_parameters only; older tooling wants rope_theta at the top."""
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" not in cfg and "rope_theta" in rope:
        cfg["rope_theta"] = rope["rope_theta"]
    for stale in ("_name_or_path", "_model_name_or_path"):
        cfg.pop(stale, None)
    path.write_text(json.dumps(cfg, indent=2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    template = gguf_string(a.gguf, "tokenizer.chat_template")
    if not template:
        sys.exit(f"{a.gguf} has no tokenizer.chat_template; the benchmark prompts need one")
    tokenizer = AutoTokenizer.from_pretrained(str(a.gguf.parent), gguf_file=a.gguf.name)
    model = plain_fp32_model(a.gguf)
    if a.out.exists():
        shutil.rmtree(a.out)
    model.save_pretrained(a.out, safe_serialization=True)
    tokenizer.save_pretrained(a.out)
    fix_tokenizer_config(a.out, template)
    add_top_level_rope_theta(a.out)
    eos = tokenizer.eos_token_id
    GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos, pad_token_id=eos).save_pretrained(
        a.out
    )
    check(a.out, tokenizer, template)
    return 0


def check(out: Path, gguf_tokenizer, template: str) -> None:
    """The saved folder must tokenize and template exactly like the GGUF."""
    saved = AutoTokenizer.from_pretrained(out)
    if saved.chat_template != template:
        sys.exit("the saved chat template differs from the GGUF's")
    probe = "Tokens: <|im_start|>user ünïcode\ttabs  and 42 numbers"
    if saved.encode(probe) != gguf_tokenizer.encode(probe):
        sys.exit("the saved tokenizer encodes differently from the GGUF's")
    print(f"wrote {out}: {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    sys.exit(main())
