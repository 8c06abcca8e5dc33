"""The ``clika-export`` command: a checkpoint in, a model folder out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from clika_cli.common import at_most_max_threads

# --activations: the quantization options each choice sets (auto: the precision's defaults,
# the sensitivity pass included). fp32 keeps the head's ranking scan on int8 activations,
# as the sensitivity pass measures against: its best logits are re-scored in fp32 anyway.
ACTIVATION_CHOICES: dict[str, dict[str, Any]] = {
    "auto": {},
    "int8": {"accuracy_level_4bit": 4, "accuracy_level_8bit": 4, "sensitivity_budget": None},
    "fp32": {
        "accuracy_level_4bit": 0,
        "accuracy_level_8bit": 0,
        "head_accuracy_level": 4,
        "sensitivity_budget": None,
        "fp32_form": "fma",
    },
}


def export_quant_options(gguf_blocks: bool, activations: str) -> dict[str, Any] | None:
    """The quantization options the command's flags ask for (None: every default)."""
    options = {**ACTIVATION_CHOICES[activations], **({} if gguf_blocks else {"gguf_matmul": False})}
    return options or None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "-o",
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    help="The model folder to write (with --ray: the folder the model folders go in).",
)
@click.option(
    "--precision",
    default="int4",
    show_default=True,
    help=(
        "Weight precision: int4 (GGUF blocks carried over exactly, else 4-bit search), int8 (the same "
        "GGUF blocks with 4-bit ones computed in fp32, else 8-bit), or fp32."
    ),
)
@click.option(
    "--context",
    type=click.IntRange(min=1),
    default=None,
    help="Context window (default: the model's, at most 32768).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    callback=at_most_max_threads,
    default=None,
    help="ONNX Runtime threads for the export's check (default: ORT's; at most one per logical CPU).",
)
@click.option(
    "--builder",
    type=click.Choice(["auto", "native", "optimum"]),
    default="auto",
    show_default=True,
    help=(
        "auto: a native family when one builds the architecture, else optimum's ONNX exporter "
        "(Hugging Face folders; a slower runtime path, continuous KV only); or name one."
    ),
)
@click.option(
    "--mmproj",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="llama.cpp's mmproj GGUF for a GGUF SOURCE: the folder also gets its vision tower.",
)
@click.option(
    "--gguf-blocks/--matmulnbits",
    default=True,
    show_default=True,
    help=(
        "Keep a GGUF's layer matrices as the file's own blocks, computed by the clika kernels "
        "(ai.clika.GgufMatMul; MatMulNBits at load where the kernel library is not built), or "
        "store them transcoded into ONNX Runtime's MatMulNBits form."
    ),
)
@click.option(
    "--activations",
    type=click.Choice(list(ACTIVATION_CHOICES)),
    default="auto",
    show_default=True,
    help=(
        "How the quantized matrices multiply their inputs: auto (int8 where the measured error "
        "allows and fp32 elsewhere, in models of at most 300M weights; int8 in larger ones), int8 "
        "(everywhere: llama.cpp's numerics, the fastest decode), or fp32 (everywhere: the "
        "float twin's answers, the slowest)."
    ),
)
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists.")
@click.option(
    "--ray",
    "on_ray",
    is_flag=True,
    help="Export every SOURCE as a Ray task (the 'cluster' extra), in parallel, into OUT/<key>, "
    "each linked as OUT/<source name>; an export already in OUT is not repeated.",
)
@click.option(
    "--ray-address", default=None, metavar="ADDR", help="With --ray: the cluster (default: a local Ray)."
)
@click.option("--no-verify", is_flag=True, help="Skip the check against the float reference.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def export_command(
    sources: tuple[Path, ...],
    out: Path,
    precision: str,
    context: int | None,
    threads: int | None,
    builder: str,
    mmproj: Path | None,
    gguf_blocks: bool,
    activations: str,
    overwrite: bool,
    on_ray: bool,
    ray_address: str | None,
    no_verify: bool,
    quiet: bool,
) -> None:
    """Export SOURCE (a Hugging Face model folder or a .gguf file) to an ONNX model folder.

    With --ray, many SOURCEs at once, as Ray tasks."""
    if precision == "fp32" and activations != "auto":
        raise click.UsageError("--activations applies to quantized weights (--precision int4 or int8)")
    quant_options = export_quant_options(gguf_blocks, activations)
    if on_ray:
        if mmproj is not None:
            raise click.UsageError("--ray exports text models; export a --mmproj pair on its own")
        _export_on_ray(
            sources, out, precision, context, builder, not no_verify, ray_address, quiet, quant_options
        )
        return
    if ray_address is not None:
        raise click.UsageError("--ray-address goes with --ray")
    if len(sources) != 1:
        raise click.UsageError(f"one SOURCE at a time ({len(sources)} given); --ray exports many")
    source = sources[0]
    from clika_export.api import ExportError, export
    from clika_export.checkpoint import CheckpointError
    from clika_quant import QuantError

    try:
        folder = export(
            source,
            out,
            precision,
            context_window=context,
            progress=not quiet,
            overwrite=overwrite,
            verify=not no_verify,
            threads=threads,
            builder=builder,
            mmproj=mmproj,
            quant_options=quant_options,
        )
    except (ExportError, CheckpointError, QuantError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(str(folder), file=sys.stdout)


def _export_on_ray(
    sources: tuple[Path, ...],
    out: Path,
    precision: str,
    context: int | None,
    builder: str,
    verify: bool,
    address: str | None,
    quiet: bool,
    quant_options: dict[str, Any] | None,
) -> None:
    try:
        import ray
    except ImportError:
        raise click.ClickException("--ray needs Ray: pip install 'clika-runtime[cluster]'") from None
    from clika_export.ray_batch import ExportOptions, export_batch, start_local_ray

    start_local_ray(address)
    try:
        result = export_batch(
            sources,
            out,
            ExportOptions(precision, context, builder, verify, quant_options),
            report=(lambda _line: None) if quiet else (lambda line: click.echo(line, err=True)),
        )
    finally:
        ray.shutdown()
    for source, folder in result.folders.items():
        click.echo(f"{source}\t{folder}")
    if result.failed:
        names = ", ".join(result.failed)
        raise click.ClickException(f"{len(result.failed)} of {len(sources)} sources failed: {names}")


def main() -> None:
    export_command()


if __name__ == "__main__":
    main()
