"""The `clika` command: chat, generate, serve, pull, list, show, rm, bench, eval.

A thin layer: arguments in, library calls out. Sub-commands import their
libraries lazily so `clika --help` stays fast and the runtime-only install
(no export extras) still answers.
"""

from __future__ import annotations

import click

from clika_cli.chat_command import chat
from clika_cli.measure_commands import bench, eval_command
from clika_cli.model_commands import list_models, pull, rm, show
from clika_cli.run_commands import generate, serve
from clika_runtime import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="clika")
def clika() -> None:
    """Run language models offline on this CPU."""


for command in (chat, generate, serve, pull, list_models, show, rm, bench, eval_command):
    clika.add_command(command)


def main() -> None:
    clika()


if __name__ == "__main__":
    main()
