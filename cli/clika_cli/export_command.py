"""The ``clika-export`` command: a checkpoint in, a model folder out."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from clika_cli.common import at_most_max_threads


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option(
    "-o", "--out", required=True, type=click.Path(path_type=Path), help="The model folder to write."
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
    "--gguf-blocks",
    is_flag=True,
    help=(
        "Keep a GGUF's layer matrices as the file's own blocks, computed by the clika kernels "
        "(ai.clika.GgufMatMul; MatMulNBits at load where the kernel library is not built)."
    ),
)
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists.")
@click.option("--no-verify", is_flag=True, help="Skip the check against the float reference.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def export_command(
    source: Path,
    out: Path,
    precision: str,
    context: int | None,
    threads: int | None,
    builder: str,
    mmproj: Path | None,
    gguf_blocks: bool,
    overwrite: bool,
    no_verify: bool,
    quiet: bool,
) -> None:
    """Export SOURCE (a Hugging Face model folder or a .gguf file) to an ONNX model folder."""
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
            quant_options={"gguf_matmul": True} if gguf_blocks else None,
        )
    except (ExportError, CheckpointError, QuantError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(str(folder), file=sys.stdout)


def main() -> None:
    export_command()


if __name__ == "__main__":
    main()
