"""The ``clika`` command: naming models, the cache (pull, list, rm), generate.

Fast checks run the command in-process on tiny checkpoints written by the
test, in an empty ``$CLIKA_CACHE``; the one real-model check pulls the default
model into the shared cache (a no-op once it is there).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from clika_cli.export_command import export_command
from clika_cli.main import clika
from clika_runtime import modelverse


@pytest.fixture
def run(tmp_cache):
    """``run(*args, input=None)`` -> click Result, in an empty cache."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(clika, [str(a) for a in args], input=input, catch_exceptions=False)

    return invoke


def test_help_lists_every_command(run):
    result = run("--help")
    assert result.exit_code == 0
    for command in ("chat", "generate", "serve", "pull", "list", "show", "rm", "bench", "eval"):
        assert f"  {command} " in result.output


def test_a_family_the_export_does_not_build_is_refused_by_name(run, tmp_cache, monkeypatch):
    import dataclasses

    from clika_export.pull.catalog import CATALOG

    # Every family of the catalog is built: a catalog entry of another one, made here.
    falcon = dataclasses.replace(CATALOG["gemma-3-270m"], name="falcon-test", family="falcon")
    monkeypatch.setitem(CATALOG, falcon.name, falcon)
    result = run("pull", "falcon-test")
    assert result.exit_code == 1
    assert "falcon-test is a falcon model" in result.output and "gemma3, granite, llama" in result.output
    assert not (tmp_cache / "blobs").exists()  # refused before fetching anything


def test_chat_with_a_base_model_says_why_it_cannot(run, make_tiny_hf, tmp_path):
    import json

    from clika_export.api import export

    make_tiny_hf(tmp_path / "hf", "qwen3")
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    del config["chat_template"]  # a base model: it continues text
    (tmp_path / "hf" / "tokenizer_config.json").write_text(json.dumps(config))
    folder = export(tmp_path / "hf", tmp_path / "base", progress=False, verify=False)
    result = run("chat", folder, "--threads", "1")
    assert result.exit_code == 1
    assert "has no chat template" in result.output and "clika generate" in result.output
    assert run("generate", folder, "hello", "--max-tokens", "3", "-q", "--threads", "1").exit_code == 0


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("no-such-model", "catalog models: smollm2-135m-instruct"),
        ("wiki-summaries", "is a data set in the catalog, not a model"),
        ("missing/model.gguf", "does not exist"),
    ],
)
def test_a_bad_name_says_why(run, spec, words):
    result = run("pull", spec)
    assert result.exit_code == 1 and words in result.output


def test_argument_errors_say_which_word_was_read_as_what(run, tiny_llama_model):
    unknown = run("generate", "no-such-model", "hi")
    assert unknown.exit_code == 1
    assert "unknown model 'no-such-model'" in unknown.output
    assert "'no-such-model' was read as the model (the prompt: 'hi')" in unknown.output
    empty = run("generate", tiny_llama_model, input="")
    assert empty.exit_code == 2
    assert f"the prompt on stdin is empty ('{tiny_llama_model}' was read as the model)" in empty.output
    serve = run("serve", "hello there")
    assert (
        serve.exit_code == 1
        and "'hello there' was read as the model (serve takes a model only" in serve.output
    )
    chat = run("chat", "hello there")
    assert chat.exit_code == 1 and "'hello there' was read as the model (chat takes no message" in chat.output
    unknown_chat = run("chat", tiny_llama_model, "--resume", "never-saved")
    assert (
        unknown_chat.exit_code == 1
        and "no saved conversation 'never-saved' (none is saved yet)" in unknown_chat.output
    )
    both = run("chat", tiny_llama_model, "--resume", "x", "--system", "terse")
    assert both.exit_code == 2 and "--system and --resume exclude each other" in both.output
    blank = run("generate", tiny_llama_model, "  ")
    assert blank.exit_code == 2 and "the prompt given is empty" in blank.output


def test_one_word_that_names_a_pulled_model_is_the_model(run, tiny_gguf):
    from clika_export.pull.puller import source_sha256
    from clika_runtime.store.names import NameRecord, write_record

    gguf = tiny_gguf("tiny.gguf").path
    assert run("pull", gguf, "-q").exit_code == 0
    write_record(NameRecord("my-tiny", source_sha256(gguf)))
    options = ("--max-tokens", "4", "--temperature", "0", "-q")
    alone = run("generate", "my-tiny", *options, input="hello")
    named = run("generate", "my-tiny", "hello", *options)
    assert alone.exit_code == 0 and alone.stdout == named.stdout and named.stdout.strip()


def test_bad_words_get_one_error_line_not_a_traceback(run, tiny_llama_model):
    not_utf8 = run("generate", tiny_llama_model, input=b"ab\xffc")
    assert not_utf8.exit_code == 2
    assert "Error: the prompt on stdin is not UTF-8 text: byte 0xff at offset 2" in not_utf8.output
    long_name = "m" * 300
    for command in (
        ("generate", long_name, "hi"),
        ("chat", long_name),
        ("pull", long_name),
        ("rm", long_name),
    ):
        result = run(*command)
        assert result.exit_code == 2, command
        assert "(300 bytes) was read as the model" in result.output and "Traceback" not in result.output
    # Bytes that are not UTF-8 reach Python as lone surrogates, in a chat line as on the command line.
    command = [sys.executable, "-m", "clika_cli.main", "chat", str(tiny_llama_model), "--max-tokens", "2"]
    chat = subprocess.run(command, input=b"hel\xfflo\n/exit\n", capture_output=True, check=False)
    assert chat.returncode == 0 and b"Traceback" not in chat.stderr
    assert b"Error: the line was not sent: byte 0xff at character 3 is not UTF-8 text" in chat.stderr
    argv = run("generate", tiny_llama_model, "a\udcffb")
    assert argv.exit_code == 2 and "the prompt: byte 0xff at character 1 is not UTF-8 text" in argv.output
    for command in (("generate", tiny_llama_model, "hi"), ("chat",), ("bench",), ("eval",)):
        too_many = run(*command, "--threads", "100000")
        assert too_many.exit_code == 2 and "100000 is more than this machine's" in too_many.output, command
    exporting = CliRunner().invoke(export_command, [str(tiny_llama_model), "-o", "x", "--threads", "100000"])
    assert exporting.exit_code == 2 and "100000 is more than this machine's" in exporting.output


def test_a_path_that_is_no_model_is_refused(run, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    result = run("generate", tmp_path / "notes.txt", "hi")
    assert result.exit_code == 1 and "neither an exported model folder" in result.output


def test_pull_a_gguf_then_again_does_nothing_then_list_generate_rm(run, tiny_gguf, tmp_cache):
    gguf = tiny_gguf("tiny.gguf").path
    assert run("list").output.startswith("no models pulled yet")

    first = run("pull", gguf)
    assert first.exit_code == 0 and "pulled tiny (int4," in first.stdout
    folder = tmp_cache / "exports" / first.stdout.split(": ")[-1].strip().split("/")[-1]
    assert (folder / "manifest.json").is_file()
    stamp = (folder / "manifest.json").stat().st_mtime_ns

    again = run("pull", gguf)
    assert again.exit_code == 0 and "already pulled; nothing to do" in again.stdout
    assert "export" not in again.stderr and (folder / "manifest.json").stat().st_mtime_ns == stamp

    table = run("list").stdout.splitlines()
    assert table[0].split() == ["NAME", "PRECISION", "SIZE", "PATH"]
    assert table[1].split()[:2] == ["tiny", "int4"] and table[1].endswith(str(folder))

    reply = run("generate", gguf, "hello", "--max-tokens", "5", "--temperature", "0")
    expected = modelverse.load(folder, threads=1).generate("hello", max_new_tokens=5, temperature=0.0)
    assert reply.exit_code == 0 and reply.stdout == expected + "\n" and "pulled" not in reply.stderr

    removed = run("rm", gguf)
    assert removed.exit_code == 0 and "removed tiny int4" in removed.stdout
    assert not folder.exists() and run("list").output.startswith("no models pulled yet")
    assert run("rm", gguf).exit_code == 1


def test_generate_runs_the_paged_cache_and_sleeping_threads_alike(run, tiny_gguf):
    gguf = tiny_gguf("tiny.gguf").path
    args = ("generate", gguf, "hello", "--max-tokens", "6", "--temperature", "0", "-q")
    continuous = run(*args)
    paged = run(*args, "--kv-cache-mode", "paged", "--no-spin", "--threads", "1")
    assert continuous.exit_code == 0 and paged.exit_code == 0
    assert paged.stdout == continuous.stdout and continuous.stdout.strip()
    wrong = CliRunner().invoke(clika, [*map(str, args), "--kv-cache-mode", "blocks"])
    assert wrong.exit_code == 2 and "'blocks' is not one of 'continuous', 'paged'" in wrong.output


def test_precisions_are_separate_exports(run, tiny_gguf):
    gguf = tiny_gguf("tiny.gguf").path
    assert run("pull", gguf, "--precision", "int8", "-q").exit_code == 0
    assert run("pull", gguf, "--precision", "fp32", "-q").exit_code == 0
    listed = [line.split()[:2] for line in run("list").stdout.splitlines()[1:]]
    assert listed == [["tiny", "int8"], ["tiny", "fp32"]]
    assert run("rm", gguf, "--precision", "int8").exit_code == 0
    assert [line.split()[:2] for line in run("list").stdout.splitlines()[1:]] == [["tiny", "fp32"]]


def test_an_exported_folder_works_where_it_lies(run, tiny_llama_model, tmp_cache):
    pulled = run("pull", tiny_llama_model)
    assert pulled.exit_code == 0 and "is an exported model (fp32," in pulled.stdout
    refused = run("generate", tiny_llama_model, "hi", "--precision", "int4")
    assert refused.exit_code == 1 and "exported fp32 model" in refused.output
    from_stdin = run(
        "generate", tiny_llama_model, "-", "--max-tokens", "6", "--temperature", "0", "-q", input="hello"
    )
    by_argument = run("generate", tiny_llama_model, "hello", "--max-tokens", "6", "--temperature", "0", "-q")
    assert from_stdin.exit_code == 0 and from_stdin.stdout == by_argument.stdout and from_stdin.stderr == ""
    assert not (tmp_cache / "exports").exists()  # nothing was exported


def test_a_hugging_face_folder_is_exported_like_a_gguf(run, tiny_llama_hf):
    first = run("pull", tiny_llama_hf, "--precision", "int8", "-q")
    assert first.exit_code == 0 and f"pulled {tiny_llama_hf.name} (int8," in first.stdout
    assert "nothing to do" in run("pull", tiny_llama_hf, "--precision", "int8").stdout


def test_bench_without_the_benchmarks_folder_says_where_it_looked(run, tmp_path):
    result = run("bench", "smollm2-135m-instruct", "--benchmarks", tmp_path)
    assert (
        result.exit_code == 1
        and "no benchmarks/peers/run.py found" in result.output
        and str(tmp_path) in result.output
    )


@pytest.mark.slow
def test_pulling_the_default_model_twice_does_the_work_once(smollm2_gguf):
    runner = CliRunner()
    runner.invoke(clika, ["pull", "smollm2-135m-instruct", "-q"], catch_exceptions=False)
    again = runner.invoke(clika, ["pull", "smollm2-135m-instruct"], catch_exceptions=False)
    assert again.exit_code == 0 and "smollm2-135m-instruct (int4," in again.stdout
    assert "already pulled; nothing to do" in again.stdout
    assert again.stdout.count("\n") == 1  # one line: no download, verify or export ran again


@pytest.mark.slow
def test_one_word_that_names_no_model_is_the_prompt_of_the_default_model(smollm2_gguf):
    from clika_export.pull.catalog import default_model

    runner = CliRunner()
    options = ["--max-tokens", "12", "--temperature", "0"]
    alone = runner.invoke(clika, ["generate", "Write a haiku", *options], catch_exceptions=False)
    named = runner.invoke(clika, ["generate", default_model(), "Write a haiku", *options, "-q"])
    assert alone.exit_code == 0 and named.exit_code == 0
    assert f"model: {default_model()} (the default" in alone.stderr
    assert alone.stdout == named.stdout and alone.stdout.strip()


def test_a_manifest_that_is_no_object_is_no_export(run, tmp_cache):
    debris = tmp_cache / "exports" / "debris"
    debris.mkdir(parents=True)
    (debris / "manifest.json").write_text("[1, 2]")
    listed = run("list")
    assert listed.exit_code == 0 and listed.output.startswith("no models pulled yet")
    refused = run("rm", "debris")
    assert (
        refused.exit_code == 1 and refused.output == "Error: debris is not in the cache (see `clika list`)\n"
    )
    assert debris.is_dir()


def test_rm_of_a_cache_entry_that_is_a_symlink_removes_the_link_only(run, tmp_cache, tiny_llama_model):
    (tmp_cache / "exports").mkdir(parents=True)
    link = tmp_cache / "exports" / "linked"
    link.symlink_to(tiny_llama_model, target_is_directory=True)
    name = run("list").stdout.splitlines()[1].split()[0]
    removed = run("rm", name)
    assert removed.exit_code == 0 and f"removed the link {link}" in removed.output
    assert not link.is_symlink() and (tiny_llama_model / "manifest.json").is_file()  # its target is kept


def test_list_and_show_as_json(run, tiny_gguf, tmp_cache):
    import json

    from clika_export.pull.catalog import default_model

    assert json.loads(run("list", "--json").stdout) == []
    gguf = tiny_gguf("tiny.gguf").path
    assert run("pull", gguf, "-q").exit_code == 0
    (listed,) = json.loads(run("list", "--json").stdout)
    assert listed["name"] == "tiny" and listed["precision"] == "int4" and listed["size_bytes"] > 0
    folder = listed["path"]
    for spec in ("tiny", folder):
        shown = json.loads(run("show", spec, "--json").stdout)
        assert shown["path"] == folder and shown["precision"]["weights"] == "int4"
        assert shown["precision"]["pulled"] == ["int4"] and shown["precision"]["choices"] == [
            "int4",
            "int8",
            "fp32",
        ]
        assert shown["architecture"]["family"] == "llama" and shown["context_window"] > 0
        assert shown["reasoning_mode"] == "never" and "reference_check" in shown["quality"]
        assert shown["size_bytes"] == listed["size_bytes"] and shown["source"]["source_format"] == "gguf"
    text = run("show", "tiny").stdout
    assert "context_window:" in text and "tool_call_format:" in text and "weights=int4" in text

    available = json.loads(run("list", "--available", "--json").stdout)
    by_name = {row["name"]: row for row in available}
    assert by_name[default_model()]["default"] and all(row["download_bytes"] > 0 for row in available)
    assert all(row["purpose"] for row in available) and by_name["gemma-3-270m"]["exportable"] is True
    table = run("list", "--available").stdout.splitlines()
    assert table[0].split() == ["NAME", "DOWNLOAD", "PULLED", "FOR"] and len(table) == len(available) + 1

    not_pulled = json.loads(run("show", default_model(), "--json").stdout)
    assert not_pulled["pull"] == f"clika pull {default_model()}" and not_pulled["pulled"] == []
    unknown = run("show", "no-such-model")
    assert (
        unknown.exit_code == 1 and unknown.output.startswith("Error: ") and "no-such-model" in unknown.output
    )


def test_a_model_folder_whose_manifest_is_no_object_is_one_error_line(run, tmp_path):
    folder = tmp_path / "odd-model"
    folder.mkdir()
    for text in ("[1, 2]", '"a string"', "null"):
        (folder / "manifest.json").write_text(text)
        for command in (("show", folder), ("generate", folder, "hi")):
            result = run(*command)
            assert result.exit_code == 1, (text, command)
            assert result.output.startswith("Error: ") and result.output.count("\n") == 1, result.output
            assert "manifest.json is not a JSON object" in result.output


def test_every_export_stage_is_numbered_and_the_step_by_step_ones_show_total_and_time_left(run, tiny_gguf):
    import re

    pulled = run("pull", tiny_gguf("tiny.gguf").path)
    assert pulled.exit_code == 0
    stages = re.findall(r"^clika-export: \[(\d)/(\d)\] (.+) \.\.\.$", pulled.stderr, flags=re.M)
    assert [(int(n), int(of)) for n, of, _ in stages] == [(n, 6) for n in range(1, 7)]
    assert stages[2][2] == "quantizing to int4"
    bars = (
        ("building graph", "layer"),
        ("quantizing to int4", "matrix"),
        ("verifying against the float reference", "step"),
    )
    for bar, unit in bars:
        # tqdm's bar: done/total [elapsed<time left, rate]
        finished = re.search(
            rf"{bar}: 100%\|[^|]*\| (\d+)/(\d+) \[\d\d:\d\d<\d\d:\d\d, [\d.]+{unit}/s\]", pulled.stderr
        )
        assert finished and finished.group(1) == finished.group(2), bar


@pytest.mark.slow
def test_show_tells_a_tool_calling_model_by_its_template(qwen05_gguf):
    import json

    runner = CliRunner()
    assert runner.invoke(clika, ["pull", "qwen2.5-coder-0.5b-instruct", "-q"]).exit_code == 0
    shown = runner.invoke(clika, ["show", "qwen2.5-coder-0.5b-instruct", "--json"], catch_exceptions=False)
    info = json.loads(shown.stdout)
    assert info["architecture"]["family"] == "qwen2" and info["tool_call_format"] == "hermes"
    assert info["reasoning_mode"] == "never" and info["chat_template"]
    assert info["catalog"]["name"] == "qwen2.5-coder-0.5b-instruct" and "int4" in info["precision"]["pulled"]


@pytest.mark.parametrize("command", ["pull", "rm"])
def test_a_weights_entry_that_is_a_fifo_is_an_error_line(run, tiny_llama_hf, tmp_path, command):
    import os
    import shutil

    folder = tmp_path / "with-fifo"
    shutil.copytree(tiny_llama_hf, folder)
    os.mkfifo(folder / "extra.safetensors")  # hashing it would wait for a writer for ever
    result = run(command, folder)
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        "Error: extra.safetensors is not a regular file (a device, pipe or socket): not read"
    )
