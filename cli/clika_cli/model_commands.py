"""``clika pull``, ``clika list``, ``clika rm``: the per-user model cache."""

from __future__ import annotations

import click

from clika_cli.arguments import check_model_word
from clika_cli.common import precision_option, say
from clika_cli.models import PRECISIONS, ModelError, cached_exports, human_size, remove


@click.command()
@click.argument("model")
@precision_option
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def pull(model: str, precision: str | None, quiet: bool) -> None:
    """Fetch, verify and export MODEL (a catalog name, a .gguf file or a Hugging Face folder) into the cache.

    A model pulled before is not fetched or exported again.
    """
    from clika_cli.common import local_model

    local = local_model(model, precision, quiet=quiet)
    size = human_size(local.size)
    if local.in_place:
        click.echo(f"{local.folder} is an exported model ({local.precision}, {size}); nothing to pull")
    elif local.pulled_now:
        click.echo(
            f"pulled {local.name} ({local.precision}, {size}) in {local.seconds:.1f} s: {local.folder}"
        )
    else:
        click.echo(
            f"{local.name} ({local.precision}, {size}) is already pulled; nothing to do: {local.folder}"
        )


@click.command(name="list")
def list_models() -> None:
    """The models in the cache: name, precision, size, path."""
    try:
        exports = cached_exports()
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    if not exports:
        say("no models pulled yet (try `clika pull smollm2-135m-instruct`)")
        return
    rows = [("NAME", "PRECISION", "SIZE", "PATH")]
    rows += [(e.name, e.precision, human_size(e.size), str(e.folder)) for e in exports]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[3]
        )


@click.command()
@click.argument("model")
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default=None,
    help="Remove only this precision's export (default: every export, and the download).",
)
def rm(model: str, precision: str | None) -> None:
    """Remove MODEL's exports from the cache (and, without --precision, its downloaded checkpoint)."""
    check_model_word(model)
    try:
        remove(model, precision, say=click.echo)
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
