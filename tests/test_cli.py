"""The ``clika`` command: naming models, the cache (pull, list, rm), generate.

Fast checks run the command in-process on tiny checkpoints written by the
test, in an empty ``$CLIKA_CACHE``; the one real-model check pulls the default
model into the shared cache (a no-op once it is there).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

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
    for command in ("chat", "generate", "serve", "pull", "list", "rm", "bench", "eval"):
        assert f"  {command} " in result.output


def test_a_family_the_export_does_not_build_is_refused_by_name(run, tmp_cache, monkeypatch):
    import dataclasses

    from clika_export.catalog import CATALOG

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
        and "no benchmarks/run.py found" in result.output
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
