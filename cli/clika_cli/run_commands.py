"""``clika generate`` (one reply, streamed to stdout) and ``clika serve`` (the OpenAI-compatible server)."""

from __future__ import annotations

import ipaddress
import sys
from typing import Any

import click

from clika_cli.arguments import ModelAndPrompt, checked_text, read_model_and_prompt, read_stdin_prompt
from clika_cli.common import (
    EngineChoice,
    assistant_option,
    count_option,
    dim,
    draft_tally,
    engine_options,
    load_model,
    local_model,
    precision_option,
    pulled_note,
    reply_options,
    say,
)
from clika_cli.interrupts import ReplyInterrupt, run_interruptibly
from clika_runtime.park_points import release


@click.command()
@click.argument("model", required=False, default=None)
@click.argument("prompt", required=False, default=None)
@precision_option
@reply_options(max_tokens=256)
@click.option("--system", default=None, help="System prompt (models with a chat template).")
@engine_options
@click.option("-q", "--quiet", is_flag=True, help="Only the reply: no progress or statistics.")
def generate(
    model: str | None,
    prompt: str | None,
    precision: str | None,
    max_tokens: int,
    temperature: float | None,
    seed: int | None,
    assistant: str | None,
    prompt_lookup: int,
    system: str | None,
    engine: EngineChoice,
    quiet: bool,
) -> None:
    """Generate MODEL's reply to PROMPT, streamed to stdout.

    One word that names no model is the prompt (for the default model); a
    model alone, or '-' as the prompt, reads the prompt from stdin.
    """
    words = read_model_and_prompt(model, prompt)
    text = read_stdin_prompt() if words.prompt is None else checked_text(words.prompt, "the prompt")
    if system is not None:
        checked_text(system, "--system")
    if not text.strip():
        raise click.UsageError(_empty_prompt(words))
    model = words.model
    if words.model_is_default and not quiet:
        say(dim(f"model: {model} (the default; name one before the prompt to choose)"))
    local = local_model(model, precision, quiet=quiet, role=_model_role(words))
    if not quiet:
        pulled_note(local)
    loaded = load_model(local, engine, quiet=quiet, assistant=assistant)
    options = {"max_new_tokens": max_tokens, "prompt_lookup_num_tokens": prompt_lookup}
    options.update({k: v for k, v in (("temperature", temperature), ("seed", seed)) if v is not None})
    if system is None:  # a model without a chat template reads the prompt as raw text
        request: dict[str, Any] = {"prompt": text}
    else:
        request = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": text}]}
    started: list[Any] = []  # the reply's stream, once submitted

    def reply(interrupt: ReplyInterrupt) -> bool:
        # Submitted inside the interruptible run: a Ctrl-C that comes as the engine takes the
        # request (its first step may already be done) is the handler's, never a stray
        # KeyboardInterrupt with the request left running.
        started.append(loaded.stream_generate(**request, **options))
        if interrupt.happened:  # it came during the render, before there was a request to cancel
            started[0].cancel(wait=False)
        return _stream(started[0], interrupt)

    def stop() -> None:  # posted from the signal's wake-up; before the submit, reply() cancels
        if started:
            started[0].cancel(wait=False)

    try:
        # Ctrl-C stops the reply at the next step (a flag, see clika_cli.interrupts), then exits 130.
        if run_interruptibly(reply, stop):
            raise SystemExit(130)
    except KeyboardInterrupt:  # before the reply began (reading the prompt, the render)
        click.echo()
        raise SystemExit(130) from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        loaded.close()
    report = loaded.report
    if report is not None and not quiet:
        rate = f", {report.decode_tokens_per_s:.1f} tokens/s" if report.decode_tokens_per_s else ""
        tally = draft_tally(report)
        drafts = f", {tally}" if tally else ""
        say(dim(f"{report.completion_tokens} tokens{rate}{drafts}, ended by {report.finish_reason}"))


@click.command(
    help="Serve every model in the store over OpenAI's and Ollama's HTTP APIs (/v1/chat/completions, "
    "/api/chat, /v1/models, /api/tags, ...), each loaded when a request names it, and a chat page at /. "
    "MODEL (pulled first when needed) is the default and is loaded at start; a model folder outside "
    "the store, --model-id or --assistant serves MODEL alone."
)
@click.argument("model", required=False, default=None)
@precision_option
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind (0.0.0.0: every interface)."
)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option(
    "--api-key",
    envvar="CLIKA_API_KEY",
    default=None,
    help="Require 'Authorization: Bearer KEY' (also $CLIKA_API_KEY).",
)
@count_option("--max-active", minimum=1, default=8, help="Requests that decode together (one shared engine).")
@count_option(
    "--max-queued", minimum=0, default=64, help="Requests that may wait beyond those; more get 503."
)
@count_option(
    "--default-max-tokens", minimum=1, default=1024, help="Reply length when a request names no max_tokens."
)
@click.option("--model-id", default=None, help="The id clients send as 'model' (default: MODEL as given).")
@click.option(
    "--cors-origins",
    default="",
    help="Origins browsers may call from, comma-separated ('*': any); none by default.",
)
@click.option(
    "--allow-image-files",
    is_flag=True,
    help="Let image_url parts name local files (data: URLs are always read; remote URLs never).",
)
@click.option(
    "--keep-alive",
    envvar="CLIKA_KEEP_ALIVE",
    default=None,
    help="How long an idle model stays loaded: 5m, 1h, seconds, 0 (unload at once), -1 (forever); "
    "default 5m (also $CLIKA_KEEP_ALIVE). A request's keep_alive overrides it.",
)
@click.option(
    "--max-loaded", type=click.IntRange(1), default=None, help="Models loaded at once (default: no limit)."
)
@click.option(
    "--memory-budget",
    default=None,
    help="Bytes the loaded models may take, weights plus KV budget (e.g. 8GB); the least recently "
    "used idle model is unloaded to make room.",
)
@click.option("--no-web", is_flag=True, help="No chat page at /.")
@click.option(
    "--replicas",
    type=click.IntRange(min=1),
    default=None,
    help="Serve from N engine replicas on Ray Serve (the 'cluster' extra), each with --threads.",
)
@click.option(
    "--ray-address",
    default=None,
    metavar="ADDR",
    help="With --replicas: the Ray cluster to join (default: a local Ray on 127.0.0.1, stopped on exit).",
)
@click.option(
    "--kv-store",
    default=None,
    metavar="DIR",
    help="With --replicas: a folder all replicas reach, keeping conversations' KV across replicas.",
)
@assistant_option
@engine_options
def serve(
    model: str | None,
    precision: str | None,
    host: str,
    port: int,
    api_key: str | None,
    max_active: int,
    max_queued: int,
    default_max_tokens: int,
    model_id: str | None,
    cors_origins: str,
    allow_image_files: bool,
    keep_alive: str | None,
    max_loaded: int | None,
    memory_budget: str | None,
    no_web: bool,
    replicas: int | None,
    ray_address: str | None,
    kv_store: str | None,
    assistant: str | None,
    engine: EngineChoice,
) -> None:
    from clika_cli.conversations import store_file
    from clika_cli.serve_store import parse_size, store_router
    from clika_runtime.server import require_server_stack
    from clika_runtime.server import serve as run_server

    try:
        require_server_stack()
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None
    role = "read as the model (serve takes a model only; clients send the prompts)"
    local = local_model(model, precision, role=role) if model else None
    if local is not None:
        pulled_note(local)
    if api_key is None and not _is_loopback(host):
        say(f"warning: serving on {host} without --api-key: anyone who can reach it may use it")
    if replicas is not None:
        from clika_cli.serve_replicas import serve_replicas

        if local is None:
            raise click.UsageError("--replicas serves one MODEL: name it")
        name = model_id or local.name
        if assistant is not None or cors_origins or allow_image_files:
            raise click.UsageError("--replicas takes no --assistant, --cors-origins or --allow-image-files")
        serve_replicas(
            str(local.folder), replicas=replicas, ray_address=ray_address, host=host, port=port,
            engine=engine, kv_store=kv_store, api_key=api_key, model_id=name, max_active=max_active,
            max_queued=max_queued, default_max_tokens=default_max_tokens,
        )  # fmt: skip
        return
    if ray_address is not None or kv_store is not None:
        raise click.UsageError("--ray-address and --kv-store go with --replicas")
    alone = local is not None and (local.in_place or model_id is not None or assistant is not None)
    if alone:
        assert local is not None
        loaded = load_model(local, engine, assistant=assistant)
        name = model_id or local.name
        served: object = loaded
    else:
        budget = None if memory_budget is None else parse_size(memory_budget)
        limits = {"max_loaded": max_loaded, "memory_budget": budget, "max_active": max_active}
        limits |= {"max_queued": max_queued, "default_max_tokens": default_max_tokens}
        limits["image_files"] = allow_image_files
        served = loaded = store_router(local, engine, keep_alive, **limits)
        name = loaded.default or "every model in the store"

    def ready(url: str) -> None:
        page = "" if no_web else f"; chat page {url.removesuffix('/v1')}/"
        say(f"serving {name} at {url} (Ctrl-C stops{page})")

    try:
        run_server(
            served,  # type: ignore[arg-type]
            host=host,
            port=port,
            api_key=api_key,
            model_id=name,
            max_active=max_active,
            max_queued=max_queued,
            default_max_tokens=default_max_tokens,
            on_ready=ready,
            log_level="warning",
            cors_origins=[origin.strip() for origin in cors_origins.split(",") if origin.strip()],
            image_files=allow_image_files,
            web=not no_web,
            conversations=store_file(),
        )
    except KeyboardInterrupt:  # uvicorn shut down cleanly, then re-raised the Ctrl-C
        say("stopped")
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    finally:
        release()  # a shutdown test held the engine while the streams ended (CLIKA_PARK)
        loaded.close()


def _stream(pieces, interrupt: ReplyInterrupt) -> bool:  # noqa: ANN001
    """Print the reply as it comes; True when Ctrl-C stopped it."""
    for piece in pieces:
        if interrupt.happened:
            break
        sys.stdout.write(piece)
        sys.stdout.flush()
    click.echo()
    if interrupt.happened:
        pieces.close()
    return interrupt.happened


def _empty_prompt(words: ModelAndPrompt) -> str:
    where = "on stdin" if words.prompt is None else "given"
    return (
        f"the prompt {where} is empty ({words.model!r} was read as the model); "
        'give the prompt after the model, e.g. clika generate MODEL "Write a haiku", or on stdin'
    )


def _model_role(words: ModelAndPrompt) -> str:
    """How the model word came to be read as the model, for an error about it."""
    if words.model_is_default:
        return f"the default model (the prompt was {_quoted(words.prompt)})"
    return f"read as the model (the prompt: {_quoted(words.prompt)})"


def _quoted(prompt: str | None) -> str:
    if prompt is None:
        return "stdin"
    return repr(prompt if len(prompt) <= 40 else prompt[:40] + "...")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
