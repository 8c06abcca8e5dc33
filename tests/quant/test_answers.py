"""Answer accuracy: the question set's pinned source, its deterministic questions, the grading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clika_export.pull import catalog
from clika_export.pull.fetch import fetch_data
from clika_quant import answers
from clika_quant.answers import AnswerSetError, Question, capital_questions, is_correct, normalize


def test_the_question_set_is_pinned_by_the_wheels_sha256():
    item = catalog.resolve(answers.DATA_ITEM)
    assert item.kind == catalog.DATA and item.is_tree
    (source,) = item.sources
    assert source.requirement == "countryinfo==1.0.1" and source.member == "countryinfo/data/"
    assert source.wheel_sha256 == "b02f6f534f0a3b9cdc73fba7e08f247e39826acfa54bf080f8e4eba812066350"
    item.check()


def test_the_fetched_set_gives_the_same_fifty_questions_every_time():
    folder = fetch_data(answers.DATA_ITEM, progress=False)
    first, again = capital_questions(folder), capital_questions(folder)
    assert first == again and len(first) == answers.QUESTIONS
    assert first[0] == Question("What is the capital of China?", ("Beijing",))
    by_text = {q.text: q.answers for q in first}
    assert by_text["What is the capital of France?"] == ("Paris",)
    assert "Washington" in by_text["What is the capital of United States?"]
    assert len(capital_questions(folder, 5)) == 5


def test_grading_takes_whole_words_and_ignores_case_and_accents():
    assert normalize("Bogotá, D.C.!") == "bogota d c"
    assert is_correct("The capital of France is Paris.", ("Paris",))
    assert is_correct("It is BRASILIA.", ("Brasília",))
    assert is_correct("Washington, D.C. is the capital.", ("Washington D.C.", "Washington"))
    assert not is_correct("L'Étoile, la Marsebeau, la France", ("Paris",))
    assert not is_correct("Parisian cafés", ("Paris",))  # a longer word is not the answer
    assert not is_correct("anything", ("",))


def test_unreadable_country_files_are_named(tmp_path: Path):
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(AnswerSetError, match="broken.json"):
        capital_questions(tmp_path)
    (tmp_path / "broken.json").write_text(json.dumps({"name": "A", "capital": "B", "population": 5}))
    with pytest.raises(AnswerSetError, match="1 countries with a capital, 2 were asked for"):
        capital_questions(tmp_path, 2)


def test_an_export_can_record_its_answer_accuracy(tiny_llama_hf: Path, tmp_path: Path):
    from clika_export.api import export
    from clika_runtime.contract.manifest import Manifest

    folder = export(tiny_llama_hf, tmp_path / "model", progress=False, answers=4)
    recorded = Manifest.read(folder).quality["answers"]
    assert recorded["questions"] == 4 and recorded["set"].startswith(answers.DATA_ITEM)
    # A tiny random model names no capital: every question is listed as wrong.
    assert recorded["correct"] == 4 - len(recorded["wrong"])
    assert "What is the capital of China?" in recorded["wrong"]


def test_clika_eval_prints_the_answer_accuracy(tiny_llama_model: Path):
    from click.testing import CliRunner

    from clika_cli.main import clika

    args = ["eval", str(tiny_llama_model), "--questions", "3", "--tokens", "64", "--window", "16"]
    result = CliRunner().invoke(clika, [*args, "--threads", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "answers 0/3 right (country-facts: capitals of the most populous countries)" in result.output
    assert "perplexity" in result.output


def test_clika_eval_refuses_more_questions_than_the_set_has(tiny_llama_model: Path):
    from click.testing import CliRunner

    from clika_cli.main import clika

    result = CliRunner().invoke(clika, ["eval", str(tiny_llama_model), "--questions", "51"])
    assert result.exit_code == 2 and "51 is not in the range 0<=x<=50" in result.output
