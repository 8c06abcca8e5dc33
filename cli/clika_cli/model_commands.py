"""``clika pull``, ``clika list``, ``clika rm``: the per-user model cache."""

from __future__ import annotations

import json

import click

from clika_cli.arguments import check_model_word
from clika_cli.common import precision_option, say
from clika_runtime.store import PRECISIONS, ModelError, cached_exports, human_size, remove, resolve


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


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")


@click.command(name="list")
@click.option("--available", is_flag=True, help="The catalog: every model a name pulls, its size and use.")
@json_option
def list_models(available: bool, as_json: bool) -> None:
    """The models in the cache (name, precision, size, path), or with --available the catalog."""
    from clika_cli.model_info import catalog_models, export_entry

    try:
        rows = catalog_models() if available else [export_entry(e) for e in cached_exports()]
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif available:
        _print_catalog(rows)
    elif not rows:
        say("no models pulled yet (try `clika pull smollm2-135m-instruct`, or `clika list --available`)")
    else:
        table = [("NAME", "PRECISION", "SIZE", "PATH")]
        table += [(r["name"], r["precision"], r["size"], r["path"]) for r in rows]
        _print_table(table)


def _print_catalog(rows: list[dict]) -> None:
    table = [("NAME", "DOWNLOAD", "PULLED", "FOR")]
    for row in rows:
        use = row["purpose"] or row["description"]
        if row["exportable"] is False:
            use += f" (the export does not build the {row['family']} family yet)"
        if row["default"]:
            use += " [default]"
        table.append((row["name"], row["download_size"], ",".join(row["pulled"]) or "-", use))
    _print_table(table)


def _print_table(table: list[tuple[str, ...]]) -> None:
    """Columns padded to their widest cell; the last one left as it is."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
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


@click.command()
@click.argument("model")
@precision_option
@json_option
def show(model: str, precision: str | None, as_json: bool) -> None:
    """What MODEL is: architecture, context, precision and its choices, size, template, tool format,
    reasoning mode and the export's quality report (a catalog model not pulled: its catalog entry)."""
    from clika_cli.model_info import describe, first_pulled, not_pulled
    from clika_export.pull.catalog import CATALOG

    check_model_word(model)
    local = first_pulled(model) if precision is None else None
    if local is None:
        item = CATALOG.get(model)
        try:
            local = resolve(model, precision, pull=False)
        except ModelError as exc:
            if item is None or precision is not None:
                raise click.ClickException(str(exc)) from None
            _print_info(not_pulled(item), as_json)
            return
    try:
        info = describe(local)
    except ValueError as exc:  # a manifest or template the runtime refuses (ManifestError is one)
        raise click.ClickException(f"{local.folder}: {exc}") from None
    _print_info(info, as_json)


def _print_info(info: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    for key, value in info.items():
        click.echo(f"{key + ':':<20} {_plain(value)}")


def _plain(value: object) -> str:
    """A value on one line: dicts as key=value pairs, lists comma-separated, None as 'none'."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_plain(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value) or "none"
    if value is None:
        return "none"
    return str(value)
