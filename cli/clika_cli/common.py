"""What the commands share: messages on stderr, naming a model, loading it."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from clika_cli.arguments import check_model_word
from clika_runtime.engine.config import MAX_DRAFT_TOKENS
from clika_runtime.engine.spec_decode.assistant import DEFAULT_ASSISTANT_TOKENS
from clika_runtime.park_points import step_parks
from clika_runtime.store import PRECISIONS, LocalModel, ModelError, human_size, resolve

if TYPE_CHECKING:
    from clika_runtime.modelverse import GenerativeModel

Command = TypeVar("Command", bound=Callable[..., object])

precision_option = click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default=None,
    help="Weight precision of the export (default: int4; an exported folder keeps its own).",
)
# More ONNX Runtime threads than logical CPUs only take turns on the same cores
# (and spinning ones fight each other), so more is refused.
MAX_THREADS = os.cpu_count() or 1


def at_most_max_threads(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """A click callback: a thread count the user gave above MAX_THREADS is a usage error."""
    given = ctx.get_parameter_source(param.name or "") is not click.core.ParameterSource.DEFAULT
    if given and value is not None and value > MAX_THREADS:
        raise click.BadParameter(
            f"{value} is more than this machine's {MAX_THREADS} logical CPUs (at most {MAX_THREADS})",
            param=param,
        )
    return value


_threads = click.option(
    "--threads",
    type=click.IntRange(min=1),
    callback=at_most_max_threads,
    default=None,
    help=f"ONNX Runtime threads, 1 to {MAX_THREADS} (this machine's logical CPUs; default: one per core).",
)
_kv_cache_mode = click.option(
    "--kv-cache-mode",
    type=click.Choice(["continuous", "paged"]),
    default="continuous",
    show_default=True,
    help="continuous: one whole-context KV slot per active request; "
    "paged: KV blocks that grow with the tokens held, prefixes shared between requests.",
)
_kv_cache_dtype = click.option(
    "--kv-cache-dtype",
    type=click.Choice(["float32", "int8"]),
    default="float32",
    show_default=True,
    help="int8: a quarter of the KV memory for a small loss of quality.",
)
_spin = click.option(
    "--spin/--no-spin",
    default=True,
    show_default=True,
    help="Worker threads busy-wait between a step's operators (faster); "
    "--no-spin lets them sleep (for cores shared with other work).",
)


@dataclass(frozen=True)
class EngineChoice:
    """How a loaded model runs, as the command line chose it."""

    threads: int | None = None
    kv_cache_mode: str = "continuous"
    kv_cache_dtype: str = "float32"
    spin: bool = True


def engine_options(command: Command) -> Command:
    """``--threads``, ``--kv-cache-mode``, ``--kv-cache-dtype`` and ``--spin/--no-spin``, handed to
    ``command`` as one ``engine: EngineChoice``."""

    @functools.wraps(command)
    def with_engine(
        *args: Any, threads: int | None, kv_cache_mode: str, kv_cache_dtype: str, spin: bool, **kw: Any
    ):
        return command(*args, engine=EngineChoice(threads, kv_cache_mode, kv_cache_dtype, spin), **kw)

    wrapped: Any = with_engine
    for option in (
        _spin,
        _kv_cache_dtype,
        _kv_cache_mode,
        _threads,
    ):  # the last applied lists its option first
        wrapped = option(wrapped)
    return wrapped


# Commands that only score text (no engine) take the thread count alone.
threads_option = _threads


def count_option(flag: str, *, minimum: int, default: int, help: str) -> Callable[[Command], Command]:
    """An integer option of at least ``minimum`` whose ``--help`` shows its default."""
    return click.option(flag, type=click.IntRange(min=minimum), default=default, show_default=True, help=help)


assistant_option = click.option(
    "--assistant",
    default=None,
    metavar="MODEL",
    help="A smaller model of the same vocabulary (name, .gguf or folder) drafting for greedy "
    f"replies, {DEFAULT_ASSISTANT_TOKENS} tokens a step at most unless a request says otherwise "
    "(assisted generation).",
)


def reply_options(max_tokens: int) -> Callable[[Command], Command]:
    """``--max-tokens`` (default ``max_tokens``), ``--temperature``, ``--seed``, ``--assistant`` and
    ``--prompt-lookup``: how a reply is decoded."""
    options = (
        count_option("--max-tokens", minimum=1, default=max_tokens, help="Longest reply in tokens."),
        click.option(
            "--temperature", type=click.FloatRange(min=0), default=None, help="Default: the model's own."
        ),
        click.option("--seed", type=click.IntRange(min=0), default=None, help="Sampling seed."),
        assistant_option,
        click.option(
            "--prompt-lookup",
            type=click.IntRange(min=0, max=MAX_DRAFT_TOKENS),
            default=0,
            show_default=True,
            help="Greedy replies draft up to N tokens a step from the conversation itself "
            "(speculative decoding: the same reply, faster when it repeats the prompt).",
        ),
    )

    def apply(command: Command) -> Command:
        for option in reversed(options):  # the last decorator applied lists its option first
            command = option(command)
        return command

    return apply


def say(text: str) -> None:
    """A status line on stderr (stdout carries only what the command produces)."""
    click.echo(text, err=True)


def dim(text: str) -> str:
    """``text`` dimmed when stderr is a terminal."""
    return click.style(text, dim=True) if sys.stderr.isatty() else text


def local_model(
    spec: str, precision: str | None, *, pull: bool = True, quiet: bool = False, role: str = ""
) -> LocalModel:
    """Resolve ``spec`` (pulling it when needed), turning a ModelError into a clean CLI error.

    ``role`` says how ``spec`` came to be read as the model, for the error.
    """
    check_model_word(spec)
    try:
        return resolve(
            spec, precision, pull=pull, say=(lambda _t: None) if quiet else say, progress=not quiet
        )
    except ModelError as exc:
        raise click.ClickException(f"{exc}; {spec!r} was {role}" if role else str(exc)) from None


def load_model(
    local: LocalModel,
    engine: EngineChoice | None = None,
    quiet: bool = False,
    *,
    assistant: str | None = None,
) -> GenerativeModel:
    """Load a model folder, saying how long it took; ``assistant`` names a model to attach (pulled if needed)."""
    from clika_runtime import modelverse
    from clika_runtime.contract.manifest import ManifestError

    engine = engine or EngineChoice()
    began = time.perf_counter()
    try:
        model = modelverse.load(
            local.folder,
            threads=engine.threads,
            kv_cache_mode=engine.kv_cache_mode,
            kv_cache_dtype=engine.kv_cache_dtype,
            allow_spinning=engine.spin,
            assistant_model=None if assistant is None else local_model(assistant, None, quiet=quiet).folder,
        )
    except (ManifestError, ValueError) as exc:  # a graph the folder lacks, a misfit assistant
        raise click.ClickException(str(exc)) from None
    if not quiet:
        size = human_size(local.size)
        say(dim(f"loaded {local.name} ({local.precision}, {size}) in {time.perf_counter() - began:.1f} s"))
    parks = step_parks()  # an interrupt test holds the engine at a step (CLIKA_PARK); None otherwise
    if parks is not None:
        model.set_stage_observer(parks)
    return model


def draft_tally(report: Any) -> str | None:
    """ "drafts kept K of N" when the reply drafted (prompt lookup or an assistant), else None."""
    if not report.draft_tokens:
        return None
    return f"drafts kept {report.accepted_draft_tokens} of {report.draft_tokens}"


def pulled_note(local: LocalModel) -> None:
    if local.pulled_now:
        say(f"pulled {local.name} ({local.precision}, {human_size(local.size)}) in {local.seconds:.1f} s")
