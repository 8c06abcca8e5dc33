"""``clika bench`` (the benchmarks/ workloads) and ``clika eval`` (clika_quant.quality)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from clika_cli.common import (
    at_most_max_threads,
    local_model,
    precision_option,
    pulled_note,
    say,
    threads_option,
)
from clika_export.pull.catalog import default_model
from clika_runtime.store import LocalModel

BENCH_SCRIPT = "peers/run.py"


@click.command()
@click.argument("model", required=False, default=default_model())
@precision_option
@click.option("--workloads", default="W1,W2,W3,W4", show_default=True, help="Comma list of W1-W4.")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--systems",
    default="clika",
    show_default=True,
    help="Comma list (peers: llama-cpp-python, onnxruntime-genai).",
)
@click.option(
    "--threads", type=click.IntRange(min=1), callback=at_most_max_threads, default=2, show_default=True
)
@click.option(
    "--benchmarks",
    "bench_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The benchmarks folder, holding peers/run.py (default: benchmarks/ of the source checkout, or of the current folder).",
)
def bench(
    model: str,
    precision: str | None,
    workloads: str,
    rounds: int,
    systems: str,
    threads: int,
    bench_dir: Path | None,
) -> None:
    """Run the benchmark workloads (benchmarks/peers/run.py of the source checkout) on MODEL."""
    script = _bench_script(bench_dir)
    local = local_model(model, precision)
    pulled_note(local)
    command = [sys.executable, str(script), "--systems", systems, "--workloads", workloads]
    command += ["--rounds", str(rounds), "--threads", str(threads), "--clika-model", str(local.folder)]
    command += _bench_source(model, local)
    say("running " + " ".join(command[1:]))
    raise SystemExit(subprocess.call(command, cwd=script.parent))


def _bench_script(bench_dir: Path | None) -> Path:
    import clika_cli

    candidates = (
        [bench_dir]
        if bench_dir
        else [Path.cwd() / "benchmarks", Path(clika_cli.__file__).resolve().parents[2] / "benchmarks"]
    )
    for folder in candidates:
        if (folder / BENCH_SCRIPT).is_file():
            return folder / BENCH_SCRIPT
    looked = ", ".join(str(folder) for folder in candidates)
    raise click.ClickException(
        f"no benchmarks/{BENCH_SCRIPT} found (looked in {looked}); the benchmarks ship with the source "
        "checkout, not the installed package: run `clika bench` from the repository or pass --benchmarks"
    )


def _bench_source(model: str, local: LocalModel) -> list[str]:
    """The GGUF the workloads tokenize their prompts with: --model NAME or --gguf PATH."""
    from clika_export.pull.catalog import CATALOG

    path = Path(model).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return ["--gguf", str(path)]
    name = model if model in CATALOG else _catalog_name_of(local.folder)
    if name is None:
        raise click.ClickException(
            f"{model}: the benchmarks need the model's GGUF (they tokenize the prompts with it); "
            "name a catalog model or a .gguf file"
        )
    return ["--model", name]


def _catalog_name_of(folder: Path) -> str | None:
    from clika_export.pull.catalog import CATALOG
    from clika_runtime.contract.manifest import Manifest

    sha = Manifest.read(folder).provenance.source_sha256
    return next((item.name for item in CATALOG.values() if item.sha256 and item.sha256 == sha), None)


@click.command(name="eval")
@click.argument("model", required=False, default=default_model())
@precision_option
@click.option(
    "--tokens", type=click.IntRange(min=64), default=4096, show_default=True, help="Perplexity token budget."
)
@click.option(
    "--window", type=click.IntRange(min=16), default=256, show_default=True, help="Perplexity window."
)
@click.option(
    "--prompts",
    type=click.IntRange(min=1, max=20),
    default=20,
    show_default=True,
    help="Chat prompts for greedy agreement with the fp32 export.",
)
@click.option(
    "--questions",
    type=click.IntRange(min=0, max=50),
    default=50,
    show_default=True,
    help="Factual questions for answer accuracy (the set has 50; 0: skip).",
)
@click.option(
    "--reference/--no-reference", default=True, help="Compare with the fp32 export of the same checkpoint."
)
@threads_option
def eval_command(
    model: str,
    precision: str | None,
    tokens: int,
    window: int,
    prompts: int,
    questions: int,
    reference: bool,
    threads: int | None,
) -> None:
    """Measure MODEL's quality: answer accuracy on factual questions, perplexity on Wikipedia summaries,
    greedy agreement with its fp32 export."""
    try:
        from clika_export.pull.fetch import fetch_data
        from clika_quant import answers, quality
    except ImportError as exc:
        raise click.ClickException(
            f"clika eval needs clika_quant.quality (the export extra): {exc}"
        ) from None
    local = local_model(model, precision)
    pulled_note(local)
    runner = quality.open_runner(local.folder, threads=threads)
    try:
        asked = (
            answers.capital_questions(fetch_data(answers.DATA_ITEM, progress=False), questions)
            if questions
            else []
        )
    except answers.AnswerSetError as exc:
        raise click.ClickException(f"the question set cannot be read: {exc}") from None
    accuracy = answers.answer_accuracy(runner, asked) if asked else None
    if accuracy is not None:
        click.echo(
            f"{local.name} {local.precision}: answers {accuracy.correct}/{accuracy.questions} right "
            f"({answers.DATA_ITEM}: capitals of the most populous countries)"
        )
    texts = quality.wiki_texts(fetch_data("wiki-summaries", progress=False), articles=max(50, tokens // 16))
    scored = quality.perplexity(runner, quality.text_tokens(runner, texts, tokens), window)
    click.echo(
        f"{local.name} {local.precision}: perplexity {scored.perplexity:.3f} over {scored.tokens_scored} tokens "
        f"({scored.windows} windows of {window}, wiki-summaries)"
    )
    if not reference or local.precision == "fp32":
        return
    if local.in_place:
        say("no fp32 reference for an exported folder given by path; skipping greedy agreement")
        return
    baseline = local_model(model, "fp32")
    ref_runner = quality.open_runner(baseline.folder, threads=threads)
    if accuracy is not None:
        ref_accuracy = answers.answer_accuracy(ref_runner, asked)
        lost = accuracy.lost_against(ref_accuracy)
        click.echo(
            f"{local.name} fp32: answers {ref_accuracy.correct}/{ref_accuracy.questions} right; "
            f"{local.precision} loses {len(lost)} of them" + (f" ({'; '.join(lost)})" if lost else "")
        )
    agreement = quality.greedy_agreement(ref_runner, runner, quality.CHAT_PROMPTS[:prompts])
    click.echo(
        f"{local.name} {local.precision} vs fp32: {agreement.exact}/{agreement.prompts} prompts decode the same "
        f"{agreement.new_tokens} greedy tokens; mean common prefix {agreement.mean_common_prefix:.1f} tokens"
    )
