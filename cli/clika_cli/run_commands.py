"""``clika generate`` (one reply, streamed to stdout) and ``clika serve`` (the OpenAI-compatible server)."""

from __future__ import annotations

import ipaddress
import sys

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
from clika_export.catalog import default_model


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
    try:
        if system is None:  # a model without a chat template reads the prompt as raw text
            pieces = loaded.stream_generate(text, **options)
        else:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
            pieces = loaded.stream_generate(messages=messages, **options)
        for piece in pieces:
            sys.stdout.write(piece)  # type: ignore[arg-type]
            sys.stdout.flush()
        click.echo()
    except KeyboardInterrupt:
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
    help=f"Serve MODEL (default: {default_model()}) over an OpenAI-compatible HTTP API "
    "(/v1/chat/completions, /v1/completions, /v1/models)."
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
    replicas: int | None,
    ray_address: str | None,
    kv_store: str | None,
    assistant: str | None,
    engine: EngineChoice,
) -> None:
    from clika_runtime.server import require_server_stack
    from clika_runtime.server import serve as run_server

    try:
        require_server_stack()
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None
    role = "read as the model (serve takes a model only; clients send the prompts)"
    local = local_model(model or default_model(), precision, role=role if model else "")
    pulled_note(local)
    if api_key is None and not _is_loopback(host):
        say(f"warning: serving on {host} without --api-key: anyone who can reach it may use it")
    name = model_id or local.name
    if replicas is not None:
        from clika_cli.serve_replicas import serve_replicas

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
    loaded = load_model(local, engine, assistant=assistant)

    def ready(url: str) -> None:
        say(f"serving {name} at {url} (model id {name!r}; Ctrl-C stops)")

    try:
        run_server(
            loaded,
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
        )
    except KeyboardInterrupt:  # uvicorn shut down cleanly, then re-raised the Ctrl-C
        say("stopped")
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    finally:
        loaded.close()


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
