"""Quality of weight-pass variants on a real model: perplexity and greedy agreement with fp32.

Exports the model once at fp32 (the reference: for a GGUF source, its
dequantized weights), then applies each variant of the weight pass to a copy
and measures, on the same text and prompts:

* perplexity on the first ``--articles`` Wikipedia summaries, ``--budget`` tokens;
* greedy agreement with the fp32 model over 20 chat prompts, 32 tokens, EOS masked;
* the RMS relative logits error and top-1 agreement over the perplexity text's first window.

    python benchmarks/quant/quant_quality.py smollm2-135m-instruct --variants exact exact-acc0 rtn-sym search

Variants are named in ``VARIANTS``; each is a precision and options of ``clika_quant.QuantOptions``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from folder_graph import continuous_graph

from clika_export.api import export, read_source
from clika_export.pull.fetch import fetch_data, fetch_gguf
from clika_quant import quantize_model
from clika_quant.quality import (
    greedy_agreement,
    logits_error,
    open_runner,
    perplexity,
    text_tokens,
    wiki_texts,
)
from clika_runtime.contract.manifest import Manifest

VARIANTS = {
    "exact": ("int4", {}),
    "exact-acc0": ("int4", {"accuracy_level": 0}),
    "exact-4bit-acc0": ("int4", {"accuracy_level_4bit": 0}),
    "exact-head-acc0": ("int4", {"head_accuracy_level": 0}),
    "exact-head-fp32": ("int4", {"head": "fp32"}),
    "rtn-sym": ("int4", {"transcode": False, "method": "rtn", "zero_point": "none"}),
    "rtn-offset": ("int4", {"transcode": False, "method": "rtn", "zero_point": "offset"}),
    "search": ("int4", {"transcode": False, "method": "search", "zero_point": "offset"}),
    "search-acc0": (
        "int4",
        {"transcode": False, "method": "search", "zero_point": "offset", "accuracy_level": 0},
    ),
    "int8": ("int8", {"transcode": False}),
    "int8-dqmm": ("int8", {"transcode": False, "int8_op": "dqmm"}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a catalog name or a .gguf path")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--articles", type=int, default=200)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()

    source = Path(args.model) if args.model.endswith(".gguf") else fetch_gguf(args.model, progress=False)
    texts = wiki_texts(fetch_data("wiki-summaries", progress=False), args.articles)
    work = Path(tempfile.mkdtemp(prefix="quant-quality-"))
    try:
        reference_folder = export(source, work / "fp32", progress=False, verify=False)
        checkpoint = read_source(source)
        matrices = Manifest.read(reference_folder).precision["matrices"]
        reference = open_runner(reference_folder, threads=args.threads)
        tokens = text_tokens(reference, texts, args.budget)
        results = {"fp32": _measure(reference, reference, tokens, args)}
        _print("fp32", results["fp32"])
        for name in args.variants:
            precision, options = VARIANTS[name]
            folder = work / name
            shutil.copytree(reference_folder, folder)
            t0 = time.perf_counter()
            record = quantize_model(continuous_graph(folder), checkpoint, precision, matrices, options)
            candidate = open_runner(folder, threads=args.threads)
            results[name] = _measure(reference, candidate, tokens, args)
            results[name].update(
                quantize_s=round(time.perf_counter() - t0, 1), forms=record["summary"]["forms"]
            )
            results[name]["model_mb"] = round((folder / "model.onnx.data").stat().st_size / 2**20, 1)
            _print(name, results[name])
            del candidate
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


def _measure(reference, candidate, tokens, args) -> dict:
    ppl = perplexity(candidate, tokens, args.window)
    result = {"perplexity": round(ppl.perplexity, 3), "tokens_scored": ppl.tokens_scored}
    result.update(logits_error(reference, candidate, tokens[: args.window]))
    if candidate is not reference:
        from clika_quant.quality import CHAT_PROMPTS

        result.update(greedy_agreement(reference, candidate, CHAT_PROMPTS[: args.prompts]).as_dict())
    return result


def _print(name: str, result: dict) -> None:
    print(name, json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
