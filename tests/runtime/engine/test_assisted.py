"""Assisted generation: an assistant model drafts, the model keeps what its own greedy picks confirm.

Tiny random llamas of one vocabulary through the real pipeline: the model
assisting itself (every draft holds), a one-layer stranger (most drafts
fail) and misfits the model must refuse by name. Whatever the assistant,
the reply is the model's own greedy reply.
"""

from __future__ import annotations

import re

import pytest

from clika_export.api import export
from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig

GREEDY = {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": 30}
PROMPTS = ["one two three one two three", "the cat sat on the mat", "x = x + 1", "hello world"]


@pytest.fixture(scope="module")
def stranger(make_tiny_hf, tiny_zoo):
    """A one-layer tiny llama of the same vocabulary, other weights: a poor guesser."""
    _, hf = tiny_zoo.checkpoint(make_tiny_hf, "llama", layers=1, seed=7)
    return tiny_zoo.export(hf)


def replies(model, **config) -> tuple[list[str], list]:
    texts, reports = [], []
    for prompt in PROMPTS:
        texts.append(model.generate(prompt, **config))
        reports.append(model.report)
    return texts, reports


def test_replies_are_the_models_own_whoever_assists(tiny_llama_model, stranger):
    plain_model = modelverse.load(tiny_llama_model, threads=1)
    plain, _ = replies(plain_model, **GREEDY)
    plain_model.close()
    for helper, all_kept in ((tiny_llama_model, True), (stranger, False), ("itself", True)):
        if helper == "itself":  # the very same object: its drafting engine must not draft in turn
            model = modelverse.load(tiny_llama_model, threads=1)
            model.set_assistant(model)
        else:
            model = modelverse.load(tiny_llama_model, threads=1, assistant_model=helper)
        assert model.assistant_model is not None
        got, reports = replies(model, **GREEDY, num_assistant_tokens=4)
        model.close()
        assert got == plain
        drafted = sum(r.draft_tokens for r in reports)
        kept = sum(r.accepted_draft_tokens for r in reports)
        assert drafted > 0 and (kept == drafted if all_kept else kept < drafted)


def test_a_batch_drafts_together_and_equals_each_alone(tiny_llama_model, stranger):
    model = modelverse.load(tiny_llama_model, threads=1, assistant_model=stranger)
    assisted = {**GREEDY, "num_assistant_tokens": 3}
    batch = model.generate_batch(PROMPTS, **assisted)  # every prompt drafting in the same steps
    assert sum(r.draft_tokens for r in model.reports) > 0
    assert (
        batch
        == [model.generate(p, **assisted) for p in PROMPTS]
        == [model.generate(p, **GREEDY) for p in PROMPTS]
    )
    # Drafting and sampled requests side by side (generate_batch left room for 4): each as it would be alone.
    configs = [
        assisted,
        {**GREEDY, "temperature": 0.8, "seed": 1},
        dict(GREEDY),
        {**assisted, "max_new_tokens": 9},
    ]
    alone = [model.generate(p, **c) for p, c in zip(PROMPTS, configs, strict=True)]
    engine = model.engine
    streams = [
        engine.submit(
            model.tokenizer.encode(model.render([{"role": "user", "content": p}])), GenerationConfig(**c)
        )
        for p, c in zip(PROMPTS, configs, strict=True)
    ]
    assert [s.result() for s in streams] == alone
    assert streams[0].report.draft_tokens > 0 and streams[1].report.draft_tokens == 0
    engine.check_integrity()
    model.close()


def test_misfits_are_refused_by_name(tiny_llama_model, tiny_llama_hf, tmp_path, smollm2_gguf):
    from clika_export.api import cached_export

    model = modelverse.load(tiny_llama_model, threads=1)
    short = modelverse.load(export(tiny_llama_hf, tmp_path / "short", context_window=64, progress=False))
    with pytest.raises(
        ValueError, match=r"context window \(64 tokens\) is shorter than this model's \(128\)"
    ):
        model.set_assistant(short)
    short.close()
    other = modelverse.load(cached_export(smollm2_gguf, "int4", progress=False), threads=1)
    with pytest.raises(ValueError, match="assistant's vocabulary has 49152 tokens, this model's 259"):
        model.set_assistant(other)
    other.close()
    model.set_assistant(None)  # detaching is always fine
    assert model.assistant_model is None
    with pytest.raises(ValueError, match="num_assistant_tokens needs an assistant model"):
        model.generate(PROMPTS[0], **GREEDY, num_assistant_tokens=2)
    with pytest.raises(ValueError, match="before the first generation"):
        model.set_assistant(model)
    model.close()


def test_the_cli_attaches_an_assistant(tiny_gguf, tmp_cache, tmp_path):
    from click.testing import CliRunner

    from clika_cli.main import clika

    model = str(tiny_gguf("tiny.gguf").path)
    args = ["generate", model, PROMPTS[0], "--max-tokens", "20", "--temperature", "0"]
    plain = CliRunner().invoke(clika, args, catch_exceptions=False)
    assisted = CliRunner().invoke(clika, [*args, "--assistant", model], catch_exceptions=False)
    assert plain.exit_code == assisted.exit_code == 0 and assisted.stdout == plain.stdout
    # The model drafting for itself keeps every draft, and the statistics line says so.
    assert re.search(r"drafts kept (\d+) of \1\b", assisted.stderr) and "drafts kept" not in plain.stderr
    misfit = export(tiny_gguf("short.gguf").path, tmp_path / "short", context_window=16, progress=False)
    refused = CliRunner().invoke(clika, [*args, "--assistant", str(misfit)])
    assert refused.exit_code == 1 and "context window (16 tokens) is shorter" in refused.output
