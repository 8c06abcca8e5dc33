"""What the optimum fallback costs: one tiny llama exported natively and through optimum, side by side.

llama has a native family, and optimum's exporter builds it too
(``builder="optimum"``), so the same random checkpoint (built here with
transformers) becomes two model folders of one precision. Both run the same
token ids through the real engine in alternating rounds: prefill (tokens per
second to the first token of a ``--prompt``-token prompt) and decode (tokens
per second after it, ``--batch`` requests at once). The figures are medians
over the rounds and the median of each round's optimum / native ratio (only
ratios within one run mean anything on a shared machine).

    python benchmarks/features/optimum_fallback.py [--hidden 256 --layers 4] [--precision int4] [--batch 1 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np

from clika_export.api import export
from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig

BUILDERS = ("native", "optimum")
VOCAB = 256 + 3  # the byte symbols and <s> </s> <pad>


def tiny_llama(folder: Path, hidden: int, layers: int) -> None:
    """A random llama checkpoint with a byte-level tokenizer, written to ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 32), num_key_value_heads=max(1, hidden // 64),
        max_position_embeddings=2048, bos_token_id=256, eos_token_id=257, pad_token_id=258,
    )  # fmt: skip
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(
                1.0 + 0.1 * torch.randn_like(param) if "norm" in name else 0.1 * torch.randn_like(param)
            )
    model.save_pretrained(folder)
    vocab = {symbol: i for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({"<s>": 256, "</s>": 257, "<pad>": 258})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<s>", "</s>", "<pad>"])
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))


def one_round(
    model: modelverse.GenerativeModel, prompts: list[list[int]], new_tokens: int
) -> tuple[float, float]:
    """(prefill tok/s of the first prompt alone, aggregate decode tok/s of all prompts at once)."""
    first = model.engine.submit(prompts[0], GenerationConfig(max_new_tokens=1, temperature=0.0))
    list(first)
    prefill = len(prompts[0]) / first.report.time_to_first_token_s
    config = GenerationConfig(max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    streams = [model.engine.submit(p, config) for p in prompts]
    for stream in streams:
        list(stream)
    return prefill, sum(stream.report.decode_tokens_per_s or 0.0 for stream in streams)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "int8", "int4"])
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        hf = Path(root) / "hf"
        tiny_llama(hf, args.hidden, args.layers)
        folders = {
            b: export(hf, Path(root) / b, args.precision, context_window=1024, progress=False, builder=b)
            for b in BUILDERS
        }
        rng = np.random.default_rng(0)
        print(
            f"tiny llama: hidden {args.hidden}, {args.layers} layers, {args.precision}, {args.threads} thread(s)"
        )
        print("| batch | figure | native | optimum | optimum / native |")
        print("|---:|---|---:|---:|---:|")
        for batch in args.batch:
            prompts = [rng.integers(0, 256, size=args.prompt).tolist() for _ in range(batch)]
            figures: dict[str, dict[str, list[float]]] = {b: {"prefill": [], "decode": []} for b in BUILDERS}
            models = {
                b: modelverse.load(folders[b], threads=args.threads, max_active=batch, prefix_reuse=False)
                for b in BUILDERS
            }
            for _ in range(args.rounds):  # alternating: the machine's drift hits both alike
                for b in BUILDERS:
                    prefill, decode = one_round(models[b], prompts, args.new_tokens)
                    figures[b]["prefill"].append(prefill)
                    figures[b]["decode"].append(decode)
            for model in models.values():
                model.close()
            for figure, unit in (
                ("prefill", "prefill tok/s (one prompt)"),
                ("decode", "decode tok/s (all rows)"),
            ):
                native, optimum = figures["native"][figure], figures["optimum"][figure]
                # The ratio of each round's pair (taken back to back), then their median.
                ratio = statistics.median(o / n for o, n in zip(optimum, native, strict=True))
                print(
                    f"| {batch} | {unit} | {statistics.median(native):.1f} | "
                    f"{statistics.median(optimum):.1f} | {ratio:.2f}x |"
                )


if __name__ == "__main__":
    main()
