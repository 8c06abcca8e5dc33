"""The int4 frontier: quality against decode speed for variants of the weight pass, in one run.

For a GGUF model it exports the fp32 reference (the file's dequantized weights),
quantizes each variant, and measures on the same text, prompts and machine:

* perplexity over the first ``--articles`` Wikipedia summaries (``--budget`` tokens,
  windows of ``--window`` tokens), as ``quant_quality.py`` does;
* greedy agreement with the fp32 model: 20 chat prompts x 32 tokens, EOS masked
  (exact matches and the mean common prefix);
* KL divergence and relative logits error against fp32 on a calibration text
  (Wikipedia summaries after the perplexity slice, so the two never overlap);
* decode time at batch 1: a ``--prompt-tokens`` prompt, then ``--steps`` greedy steps
  through the step graph, one thread, spinning off; every round times every
  variant (and the peers) once in a rotating order, and the median round counts.

With ``--peers-dir`` (the folder ``setup_peers.sh`` makes: ``venv/``, ``models/``)
the same figures are taken for llama.cpp (llama-cpp-python on the same GGUF:
perplexity on the same token ids, greedy agreement with our fp32 model, decode
time) and onnxruntime-genai's int4 model (decode time), each in the peers' own
Python, so ratios between systems come from one run.

    python benchmarks/quant/quant_frontier.py smollm2-135m-instruct --variants level4 centered ...
    python benchmarks/quant/quant_frontier.py smollm2-135m-instruct --search --base centered

``--search`` ranks where fp32 compute (accuracy level 0) buys the most: starting
from ``--base`` it sets one matrix kind, one layer, or one (kind, layer) pair of
4-bit weights to level 0 and reports the calibration KL of each, by rewriting the
MatMulNBits nodes' ``accuracy_level`` of one quantized graph (no re-quantizing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from folder_graph import continuous_graph

NEW_TOKENS = 32

# name -> (precision, QuantOptions fields), spelled out so that a variant keeps its meaning when the
# defaults move. "level4"/"level0": the GGUF's zero points as they are, no re-scoring (the earlier
# default and quality setting); "centered": zero points on the mean code; "-rescored": the head's 16
# best logits re-scored in fp32; "-last0" etc.: those 4-bit weights at accuracy level 0; "scan4": a
# 4-bit copy of the head ranks the candidates ("nibbles": its own high bits); "-twin": a GGUF table
# that rounds the head's matrix coarser read from the head.
_EXACT_HEAD = {"accuracy_level_4bit_by_role": {}, "head_scan_bits": None, "table_from_head": False}
OLD = {"center_zero_points": False, "head_rescore_top_k": 0, **_EXACT_HEAD}
NEW = {"center_zero_points": True, "head_rescore_top_k": 16, **_EXACT_HEAD}


def _with(base: dict, precision: str = "int4", **changes) -> tuple[str, dict]:
    return precision, {**base, **changes}


VARIANTS = {
    "default": ("int4", {}),
    "level4": _with(OLD),
    "level0": _with(OLD, accuracy_level_4bit=0),
    "rescored": _with(OLD, head_rescore_top_k=16),
    "centered": _with(NEW, head_rescore_top_k=0),
    "centered-rescored": _with(NEW),
    "centered-rescored-k4": _with(NEW, head_rescore_top_k=4),
    "centered-rescored-k64": _with(NEW, head_rescore_top_k=64),
    "centered-scan4": _with(NEW, head_scan_bits=4, head_scan="copy"),
    "centered-scan4-k64": _with(NEW, head_scan_bits=4, head_scan="copy", head_rescore_top_k=64),
    "centered-scan4-k128": _with(NEW, head_scan_bits=4, head_scan="copy", head_rescore_top_k=128),
    "centered-scan4-k256": _with(NEW, head_scan_bits=4, head_scan="copy", head_rescore_top_k=256),
    "centered-nibbles-k256": _with(NEW, head_scan_bits=4, head_scan="nibbles", head_rescore_top_k=256),
    "centered-nibbles-k1024": _with(NEW, head_scan_bits=4, head_scan="nibbles", head_rescore_top_k=1024),
    "centered-nibbles-k256-twin": _with(
        NEW, head_scan_bits=4, head_scan="nibbles", head_rescore_top_k=256, table_from_head=True
    ),
    "centered-level0": _with(NEW, accuracy_level_4bit=0),
    # --precision int8: 8-bit float weights, GGUF blocks kept; "-level0": 4-bit blocks computed in fp32
    "int8-default": ("int8", {}),
    "int8-centered": _with(NEW, "int8", accuracy_level_4bit=4),
    "int8-level0": _with(NEW, "int8", accuracy_level_4bit=0),
    "int8-level0-scan4": _with(
        NEW, "int8", accuracy_level_4bit=0, head_scan_bits=4, head_scan="copy", head_rescore_top_k=256
    ),
}
_PLACES = {
    "qkv0": "attn.qkv",
    "o0": "attn.o",
    "gate_up0": "mlp.gate_up",
    "down0": "mlp.down",
    "first0": "@0",
    "last0": "@-1",
    "gate_up-last0": "mlp.gate_up@-1",
}
for _name, _place in _PLACES.items():
    VARIANTS[f"centered-{_name}"] = _with(NEW, accuracy_level_4bit_by_role={_place: 0})
VARIANTS["centered-qkv-last0"] = _with(NEW, accuracy_level_4bit_by_role={"attn.qkv": 0, "@-1": 0})
ROLES = ("attn.qkv", "attn.o", "mlp.gate_up", "mlp.down")


# -- measurements in the project's environment ----------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="a catalog name or a .gguf path")
    parser.add_argument("--variants", nargs="*", default=["level4", "level0", "centered"])
    parser.add_argument(
        "--variant-json",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help='an extra variant: a name and the QuantOptions fields as JSON ("precision": int4 by default)',
    )
    parser.add_argument(
        "--folder",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="also measure an exported model folder of the same model",
    )
    parser.add_argument("--articles", type=int, default=200)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--calib-articles", type=int, default=60, help="summaries after the perplexity slice")
    parser.add_argument("--calib-tokens", type=int, default=512)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument(
        "--answers",
        type=int,
        default=0,
        help="factual questions for answer accuracy (0: skip; the set has 50)",
    )
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-fp32-timing", action="store_true")
    parser.add_argument("--timing-only", action="store_true", help="skip the quality measurements")
    parser.add_argument(
        "--session-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an ORT session config entry for our models (repeatable)",
    )
    parser.add_argument("--spinning", action="store_true", help="let ORT's intra-op threads spin")
    parser.add_argument("--peers-dir", type=Path, default=None)
    parser.add_argument("--search", action="store_true", help="rank level-0 placements by calibration KL")
    parser.add_argument("--base", default="default", help="the variant --search starts from")
    parser.add_argument("--work", type=Path, help="keep exports here between runs (default: a temp folder)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--peer", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        return peer_main(Path(args.peer[0]), Path(args.peer[1]))
    if not args.model:
        parser.error("the model is required")
    variants = dict(VARIANTS)
    for item in args.variant_json:
        name, _, options = item.partition("=")
        fields = json.loads(options)
        variants[name] = (fields.pop("precision", "int4"), fields)
    unknown = [v for v in args.variants if v not in variants]
    if unknown:
        parser.error(f"unknown variants {unknown} (known: {sorted(variants)})")
    work = args.work or Path(tempfile.mkdtemp(prefix="quant-frontier-"))
    try:
        results = run(args, variants, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


def run(args, variants: dict, work: Path) -> dict:
    from clika_export.pull.fetch import fetch_data, fetch_gguf
    from clika_quant.quality import text_tokens, wiki_texts

    def open_runner(folder, threads):
        return runner_for(
            folder, threads, args.spinning, dict(kv.split("=", 1) for kv in args.session_config)
        )

    source = Path(args.model) if args.model.endswith(".gguf") else fetch_gguf(args.model, progress=False)
    texts = wiki_texts(fetch_data("wiki-summaries", progress=False), args.articles + args.calib_articles)
    reference_folder = export_reference(source, work)
    reference = open_runner(reference_folder, threads=args.threads)
    eval_tokens = text_tokens(reference, texts[: args.articles], args.budget)
    calib_tokens = text_tokens(reference, texts[args.articles :], args.calib_tokens)
    if args.search:
        base = quantized_folder(source, reference_folder, work, args.base, variants[args.base])
        results = search(reference, base, calib_tokens, args)
        return {"search": results}
    prompts = prompt_ids(reference, args.prompts)
    ref_tokens = [] if args.timing_only else reference_greedy(reference, prompts)
    results: dict[str, dict] = {"fp32": {}}
    questions = question_set(args.answers) if args.answers and not args.timing_only else []
    ref_answers = answered(reference, questions) if questions else None
    if not args.timing_only:
        results["fp32"]["perplexity"] = round(perplexity_of(reference, eval_tokens, args), 3)
        if ref_answers:
            results["fp32"]["answers"] = f"{ref_answers.correct}/{ref_answers.questions}"
    runners = {} if args.no_fp32_timing else {"fp32": reference}
    folders = {name: None for name in args.variants}
    folders.update(dict(item.split("=", 1) for item in args.folder))
    for name, given in folders.items():
        folder = (
            Path(given) if given else quantized_folder(source, reference_folder, work, name, variants[name])
        )
        runner = open_runner(folder, threads=args.threads)
        results[name] = {}
        if not args.timing_only:
            results[name] = quality(reference, runner, eval_tokens, calib_tokens, prompts, ref_tokens, args)
            if ref_answers:
                results[name].update(answer_figures(answered(runner, questions), ref_answers))
        results[name]["options"] = variants[name][1] if name in variants else str(folder)
        results[name]["model_mb"] = round((folder / "model.onnx.data").stat().st_size / 2**20, 1)
        print(name, json.dumps(results[name]), flush=True)
        runners[name] = runner
    peers = peer_spec(args, source, eval_tokens, prompts, reference)
    if peers and not args.timing_only:
        results.update(peer_quality(peers, ref_tokens))
        if ref_answers:
            results["llama.cpp"].update(peer_answers(peers, reference, questions, ref_answers))
    timings = time_decode(runners, peers, eval_tokens[: args.prompt_tokens], args) if args.rounds else {}
    for name, (wall, cpu, prefill) in timings.items():
        results.setdefault(name, {}).update(
            ms_per_token=round(wall, 2),
            tok_per_s=round(1000 / wall, 1),
            cpu_ms_per_token=round(cpu, 2),
            prefill_tok_per_s=round(args.prompt_tokens * 1000 / prefill, 1),
        )
    print_table(results)
    return results


def runner_for(folder: Path, threads: int, spinning: bool, config: dict[str, str]):
    """A ``SequenceRunner`` on the folder's continuous graph with extra ORT session config entries."""
    import dataclasses

    from clika_quant.quality import SequenceRunner
    from clika_runtime.contract.model_folder import open_model_folder, open_session, session_options

    opened = open_model_folder(folder, threads=threads, allow_spinning=spinning)
    if config:
        options = session_options(threads, allow_spinning=spinning)
        for key, value in config.items():
            options.add_session_config_entry(key, value)
        session = open_session(folder / opened.graph.file, options, opened.manifest.rope_tables)
        opened = dataclasses.replace(opened, session=session)
    return SequenceRunner(opened, min(1024, opened.manifest.context_window))


def export_reference(source: Path, work: Path) -> Path:
    from clika_export.api import export
    from clika_runtime.contract.manifest import Manifest, ManifestError

    folder = work / f"{source.stem}-fp32"
    try:
        Manifest.read(folder)
        return folder
    except ManifestError:
        return export(source, folder, progress=False, verify=False, overwrite=True)


def quantized_folder(source: Path, reference_folder: Path, work: Path, name: str, variant) -> Path:
    """A copy of the reference quantized as ``variant`` (kept in ``work`` under its options' text)."""
    from clika_export.api import read_source
    from clika_quant import quantize_model
    from clika_runtime.contract.manifest import Manifest

    precision, options = variant
    folder = work / f"{source.stem}-{name}"
    stamp = folder / "variant.json"
    wanted = json.dumps([precision, options, quant_code_digest()], sort_keys=True)
    if stamp.exists() and stamp.read_text() == wanted:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(reference_folder, folder)
    matrices = Manifest.read(reference_folder).precision["matrices"]
    quantize_model(continuous_graph(folder), read_source(source), precision, matrices, options)
    stamp.write_text(wanted)
    return folder


def quant_code_digest() -> str:
    """A digest of the weight pass's source: a kept folder is quantized again when the code changed."""
    import hashlib

    import clika_quant

    digest = hashlib.sha256()
    for path in sorted(Path(clika_quant.__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def prompt_ids(runner, count: int) -> list[list[int]]:
    from clika_quant.quality import CHAT_PROMPTS, chat_prompt_ids

    return [chat_prompt_ids(runner, p) for p in CHAT_PROMPTS[:count]]


def reference_greedy(reference, prompts: list[list[int]]) -> list[list[int]]:
    from clika_quant.quality import greedy_tokens

    return [greedy_tokens(reference, ids, NEW_TOKENS) for ids in prompts]


def perplexity_of(runner, tokens: list[int], args) -> float:
    from clika_quant.quality import perplexity

    return perplexity(runner, tokens, args.window).perplexity


def quality(reference, runner, eval_tokens, calib_tokens, prompts, ref_tokens, args) -> dict:
    from clika_quant.quality import greedy_tokens

    prefixes = [
        common_prefix(ref, greedy_tokens(runner, ids, NEW_TOKENS))
        for ids, ref in zip(prompts, ref_tokens, strict=True)
    ]
    return {
        "perplexity": round(perplexity_of(runner, eval_tokens, args), 3),
        "exact": f"{sum(p == NEW_TOKENS for p in prefixes)}/{len(prefixes)}",
        "mean_prefix": round(float(np.mean(prefixes)), 2),
        **calibration_error(reference, runner, calib_tokens, args.window),
    }


def question_set(count: int):
    from clika_export.pull.fetch import fetch_data
    from clika_quant.answers import DATA_ITEM, capital_questions

    return capital_questions(fetch_data(DATA_ITEM, progress=False), count)


def answered(runner, questions):
    from clika_quant.answers import answer_accuracy

    return answer_accuracy(runner, questions)


def answer_figures(got, reference) -> dict:
    return {"answers": f"{got.correct}/{got.questions}", "answers_lost": len(got.lost_against(reference))}


def peer_answers(peers: dict, reference, questions, ref_answers) -> dict:
    """llama.cpp's greedy replies to the same prompt ids, graded here by the same rule as ours."""
    from clika_quant.answers import MAX_NEW_TOKENS, Accuracy, Answered, first_line, is_correct, question_ids

    spec = {"questions": [question_ids(reference, q.text) for q in questions], "max_new": MAX_NEW_TOKENS}
    got = run_peer(peers, {"task": "answers", "system": "llama.cpp", **spec})
    tokenizer = reference.model.tokenizer
    replies = [first_line(tokenizer.decode(tokens)) for tokens in got["replies"]]
    accuracy = Accuracy(
        tuple(Answered(q, r, is_correct(r, q.answers)) for q, r in zip(questions, replies, strict=True))
    )
    print("llama.cpp answers", accuracy.correct, flush=True)
    return answer_figures(accuracy, ref_answers)


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))


_REF_LOGITS: dict[tuple[int, int], list[np.ndarray]] = {}


def calibration_error(reference, runner, tokens: list[int], window: int) -> dict:
    """Mean KL(fp32 || candidate) per position, RMS relative logits error and top-1 agreement."""
    key = (id(reference), len(tokens))
    if key not in _REF_LOGITS:
        _REF_LOGITS[key] = [
            window_logits(reference, tokens[s : s + window]) for s in range(0, len(tokens), window)
        ]
    kls, rels, top1 = [], [], []
    for start, ref in zip(range(0, len(tokens), window), _REF_LOGITS[key], strict=True):
        got = window_logits(runner, tokens[start : start + window])
        ref_logp, got_logp = log_softmax(ref), log_softmax(got)
        kls.append((np.exp(ref_logp) * (ref_logp - got_logp)).sum(-1))
        rels.append(np.linalg.norm(got - ref, axis=-1) / np.linalg.norm(ref, axis=-1))
        top1.append(got.argmax(-1) == ref.argmax(-1))
    rel = np.concatenate(rels)
    return {
        "calib_kl": float(np.concatenate(kls).mean()),
        "calib_rel_error": round(float(np.sqrt((rel**2).mean())), 5),
        "calib_top1": round(float(np.concatenate(top1).mean()), 4),
    }


def window_logits(runner, tokens: list[int]) -> np.ndarray:
    runner.reset()
    return runner.step(tokens, all_logits=True).astype(np.float64)


def log_softmax(x: np.ndarray) -> np.ndarray:
    top = x.max(-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(-1, keepdims=True))


# -- decode timing -------------------------------------------------------------------------


def decode_ms(runner, prompt: list[int], steps: int) -> tuple[float, float, float]:
    """Wall and CPU milliseconds per greedy decode step after ``prompt`` (argmax in NumPy, as the engine).

    The process's CPU time hardly counts the time other work on a shared machine takes the
    core away, so its ratios are steadier than wall-clock ones (one intra-op thread, no spinning).
    """
    runner.reset()
    begin = time.perf_counter()
    logits = runner.step(prompt)[-1]
    prefill = (time.perf_counter() - begin) * 1000
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        logits = runner.step([int(np.argmax(logits))])[-1]
    return (time.perf_counter() - start) * 1000 / steps, (time.process_time() - cpu) * 1000 / steps, prefill


def time_decode(
    runners: dict, peers: dict | None, prompt: list[int], args
) -> dict[str, tuple[float, float, float]]:
    """Median (wall, CPU) ms per decode step and wall ms of the prompt of every system over rounds
    in a rotating order."""
    systems = list(runners) + (["llama.cpp"] if peers else [])
    systems += ["onnxruntime-genai int4"] if peers and peers["genai_dir"] else []
    for runner in runners.values():
        decode_ms(runner, prompt, 8)  # warm-up: first-call allocations out of the timing
    rounds: dict[str, list[tuple[float, float, float]]] = {name: [] for name in systems}
    for r in range(args.rounds):
        order = systems[r % len(systems) :] + systems[: r % len(systems)]
        for name in order:
            if name in runners:
                rounds[name].append(decode_ms(runners[name], prompt, args.steps))
            else:
                rounds[name].append(tuple(run_peer(peers, {"task": "time", "system": name})["ms"]))
        print(f"round {r + 1}:", {k: [round(x, 2) for x in v[-1]] for k, v in rounds.items()}, flush=True)
    return {
        name: tuple(statistics.median(v[i] for v in values) for i in range(3))
        for name, values in rounds.items()
    }


# -- the peers, run in their own environment -----------------------------------------------


def peer_spec(args, source: Path, eval_tokens, prompts, reference) -> dict | None:
    if not args.peers_dir:
        return None
    python = args.peers_dir / "venv" / "bin" / "python"
    genai = args.peers_dir / "models" / "genai-int4"
    if not python.exists():
        raise SystemExit(f"no peers environment at {args.peers_dir} (run benchmarks/peers/setup_peers.sh)")
    if genai.exists() and not genai_matches(genai, reference.model.manifest.architecture):
        genai = Path("-")  # built from another model: not a peer of this one
    tok = reference.model.manifest.tokenizer
    return {
        "python": str(python),
        "gguf": str(source),
        "genai_dir": str(genai) if genai.is_dir() else None,
        "threads": args.threads,
        "spinning": args.spinning,
        "window": args.window,
        "eval_tokens": list(eval_tokens),
        "bos": tok.bos_token_id if tok.add_bos_token else None,
        "eos": list(tok.eos_token_ids),
        "prompts": prompts,
        "prompt": list(eval_tokens[: args.prompt_tokens]),
        "steps": args.steps,
    }


def genai_matches(folder: Path, architecture) -> bool:
    decoder = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    return (decoder["hidden_size"], decoder["num_hidden_layers"]) == (
        architecture.hidden_size,
        architecture.num_layers,
    )


def run_peer(peers: dict, task: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec.write_text(json.dumps({**peers, **task}))
        policy = "ACTIVE" if peers["spinning"] else "PASSIVE"
        env = {**os.environ, "OMP_NUM_THREADS": str(peers["threads"]), "OMP_WAIT_POLICY": policy}
        subprocess.run([peers["python"], __file__, "--peer", str(spec), str(out)], check=True, env=env)
        return json.loads(out.read_text())


def peer_quality(peers: dict, ref_tokens: list[list[int]]) -> dict:
    got = run_peer(peers, {"task": "quality", "system": "llama.cpp"})
    prefixes = [common_prefix(r, g) for r, g in zip(ref_tokens, got["greedy"], strict=True)]
    result = {
        "perplexity": round(got["perplexity"], 3),
        "exact": f"{sum(p == NEW_TOKENS for p in prefixes)}/{len(prefixes)}",
        "mean_prefix": round(float(np.mean(prefixes)), 2),
    }
    print("llama.cpp", json.dumps(result), flush=True)
    return {"llama.cpp": result}


def peer_main(spec_path: Path, out_path: Path) -> None:
    """Inside the peers' environment: time one system, or llama.cpp's perplexity and greedy tokens."""
    spec = json.loads(spec_path.read_text())
    if spec["system"] == "llama.cpp" and spec["task"] == "answers":
        result = llama_answers(spec)
    elif spec["system"] == "llama.cpp":
        result = llama_quality(spec) if spec["task"] == "quality" else {"ms": llama_decode_ms(spec)}
    else:
        result = {"ms": genai_decode_ms(spec)}
    out_path.write_text(json.dumps(result))


def _llama(spec: dict, logits_all: bool):
    import llama_cpp

    return llama_cpp.Llama(
        model_path=spec["gguf"],
        n_ctx=1024,
        n_batch=512,
        n_threads=spec["threads"],
        n_threads_batch=spec["threads"],
        logits_all=logits_all,
        verbose=False,
    )


def llama_quality(spec: dict) -> dict:
    """Perplexity on the same token ids and windows as ours, and greedy tokens with EOS masked."""
    llm = _llama(spec, logits_all=True)
    tokens, window, bos = spec["eval_tokens"], spec["window"], spec["bos"]
    prefix = [bos] if bos is not None else []
    nll, count = 0.0, 0
    for start in range(0, len(tokens) - 1, window):
        chunk = tokens[start : start + window]
        if len(chunk) < 2:
            break
        llm.reset()
        llm.eval(prefix + chunk)
        logits = np.asarray(llm.scores[len(prefix) : len(prefix) + len(chunk) - 1], np.float64)
        logp = log_softmax(logits)
        nll -= float(logp[np.arange(len(chunk) - 1), chunk[1:]].sum())
        count += len(chunk) - 1
    greedy = []
    for ids in spec["prompts"]:
        llm.reset()
        llm.eval(ids)
        out = []
        for _ in range(NEW_TOKENS):
            logits = np.array(llm.scores[llm.n_tokens - 1], np.float64)
            logits[spec["eos"]] = -np.inf
            out.append(int(np.argmax(logits)))
            llm.eval([out[-1]])
        greedy.append(out)
    return {"perplexity": float(np.exp(nll / count)), "greedy": greedy}


def llama_answers(spec: dict) -> dict:
    """Greedy reply tokens (EOS ends one) to each question's prompt ids.

    ``logits_all``: without it llama-cpp-python 0.3.36 leaves ``scores[n_tokens - 1]`` zero after
    ``eval`` (every reply was token 0, graded 0/50)."""
    llm = _llama(spec, logits_all=True)
    replies = []
    for ids in spec["questions"]:
        llm.reset()
        llm.eval(ids)
        out: list[int] = []
        while len(out) < spec["max_new"]:
            token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            if token in spec["eos"]:
                break
            out.append(token)
            llm.eval([token])
        replies.append(out)
    return {"replies": replies}


def llama_decode_ms(spec: dict) -> tuple[float, float, float]:
    llm = _llama(spec, logits_all=False)
    for steps in (8, spec["steps"]):  # the first pass warms up
        llm.reset()
        begin = time.perf_counter()
        llm.eval(spec["prompt"])
        prefill = (time.perf_counter() - begin) * 1000
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
        ms = (
            (time.perf_counter() - start) * 1000 / steps,
            (time.process_time() - cpu) * 1000 / steps,
            prefill,
        )
    return ms


def genai_decode_ms(spec: dict) -> tuple[float, float, float]:
    import onnxruntime_genai as og

    config = og.Config(spec["genai_dir"])
    session = {
        "intra_op_num_threads": spec["threads"],
        "inter_op_num_threads": 1,
        "session.intra_op.allow_spinning": "1" if spec["spinning"] else "0",
        "session.inter_op.allow_spinning": "1" if spec["spinning"] else "0",
    }
    config.overlay(
        json.dumps({"model": {"eos_token_id": spec["eos"], "decoder": {"session_options": session}}})
    )
    model = og.Model(config)
    for steps in (8, spec["steps"]):
        total = len(spec["prompt"]) + steps + 1
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=total, min_length=total)
        gen = og.Generator(model, params)
        begin = time.perf_counter()
        gen.append_tokens(np.array([spec["prompt"]], dtype=np.int32))
        gen.generate_next_token()  # the prompt's step
        prefill = (time.perf_counter() - begin) * 1000
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            gen.generate_next_token()
        ms = (
            (time.perf_counter() - start) * 1000 / steps,
            (time.process_time() - cpu) * 1000 / steps,
            prefill,
        )
    return ms


# -- search: where level 0 buys the most ---------------------------------------------------


def search(reference, base_folder: Path, calib_tokens: list[int], args) -> list[dict]:
    """Calibration KL of the base and of each single level-0 placement of 4-bit weights."""
    import onnx

    from clika_runtime.contract.model_folder import open_model_folder

    model = onnx.load(str(continuous_graph(base_folder)), load_external_data=False)
    opened = open_model_folder(base_folder, threads=args.threads)
    units = level_units(model, base_folder)
    placements = [("none", [])] + [(f"all {r}", [u for u in units if u[0] == r]) for r in ROLES]
    layers = sorted({u[1] for u in units})
    placements += [(f"layer {layer}", [u for u in units if u[1] == layer]) for layer in layers]
    placements += [
        (f"{r}@{layer}", [u for u in units if u[:2] == (r, layer)]) for r in ROLES for layer in layers
    ]
    placements.append(("all", units))
    results = []
    for label, chosen in placements:
        if label != "none" and not chosen:
            continue
        runner = variant_runner(model, opened, {u[2] for u in chosen}, args.threads)
        row = {
            "placement": label,
            "nodes": len(chosen),
            **calibration_error(reference, runner, calib_tokens, args.window),
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    return results


def level_units(model, folder: Path) -> list[tuple[str, int, str]]:
    """(role, layer, node name) of every 4-bit MatMulNBits of a layer."""
    from clika_runtime.contract.manifest import Manifest

    scopes = {}
    for info in Manifest.read(folder).precision["matrices"].values():
        if info.get("layer") is None:
            continue
        for node in info.get("nodes", []):
            scopes[node.rsplit("/", 1)[0]] = (info["roles"][0], info["layer"])
    units = []
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        bits = next(a.i for a in node.attribute if a.name == "bits")
        scope = next((s for s in scopes if node.name.startswith(s + "/")), None)
        if scope and bits == 4:
            units.append((*scopes[scope], node.name))
    return units


def variant_runner(model, opened, level0: set[str], threads: int):
    """A runner on ``model`` with the named MatMulNBits at accuracy level 0 (same weights file)."""
    import dataclasses

    import onnx

    from clika_quant.quality import SequenceRunner
    from clika_runtime.contract.model_folder import open_session, session_options

    variant = onnx.ModelProto()
    variant.CopyFrom(model)
    for node in variant.graph.node:
        if node.name in level0:
            for attr in node.attribute:
                if attr.name == "accuracy_level":
                    attr.i = 0
    path = opened.path / "model.search.onnx"
    onnx.save(variant, str(path))
    session = open_session(path, session_options(threads), opened.manifest.rope_tables)
    changed = dataclasses.replace(opened, session=session)
    return SequenceRunner(changed, min(1024, opened.manifest.context_window))


# -- output --------------------------------------------------------------------------------


def print_table(results: dict) -> None:
    fp32_cpu = results.get("fp32", {}).get("cpu_ms_per_token")
    print(
        "\n| variant | answers | lost vs fp32 | perplexity | exact | mean prefix | calib KL | ms/token | tok/s "
        "| prefill tok/s | CPU ms/token | x fp32 (CPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        speedup = f"{fp32_cpu / r['cpu_ms_per_token']:.2f}" if fp32_cpu and r.get("cpu_ms_per_token") else ""
        kl = f"{r['calib_kl']:.4f}" if "calib_kl" in r else ""
        print(
            f"| {name} | {r.get('answers', '')} | {r.get('answers_lost', '')} | {r.get('perplexity', '')} "
            f"| {r.get('exact', '')} | {r.get('mean_prefix', '')} | {kl} | {r.get('ms_per_token', '')} "
            f"| {r.get('tok_per_s', '')} | {r.get('prefill_tok_per_s', '')} | {r.get('cpu_ms_per_token', '')} "
            f"| {speedup} |"
        )


if __name__ == "__main__":
    main()
