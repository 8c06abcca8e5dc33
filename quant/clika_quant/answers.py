"""Answer accuracy: how many factual questions with known answers a model folder answers right.

The question set is built deterministically from the ``country-facts`` catalog
item (the ``countryinfo`` wheel's country files, pinned by the wheel's sha256):
"What is the capital of <country>?" for the ``count`` most populous countries
(ties by name). Each question is put through the model's chat template (a
"Question: ... Answer:" line for a model without one) and answered greedily,
up to ``MAX_NEW_TOKENS`` tokens, stopping at EOS, the end of the first line or
as soon as it names the answer; a reply is right when it names the capital (or
a listed other name of it) as whole words, case and accents ignored.

Perplexity and greedy agreement see every logit; this is what a user sees: a
model that drifts by a token on an uncertain first word can answer "L'Étoile"
where its float twin says "Paris".
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clika_quant.quality import SequenceRunner, chat_prompt_ids

DATA_ITEM = "country-facts"
QUESTIONS = 50
MAX_NEW_TOKENS = 20
# Other names a correct reply may use: the data's spelling is one of several in use, or dated.
OTHER_NAMES = {
    "Washington D.C.": ("Washington",),
    "Kyiv": ("Kiev",),
    "Nur-Sultan": ("Astana",),
    "Naypyidaw": ("Nay Pyi Taw", "Naypyitaw"),
    "Sana'a": ("Sanaa",),
    "Pretoria": ("Cape Town", "Bloemfontein"),  # South Africa's three capitals
    "Brasília": ("Brasilia",),
}


class AnswerSetError(ValueError):
    """The question data cannot be read (the message names the file and the problem)."""


@dataclass(frozen=True)
class Question:
    text: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Answered:
    question: Question
    reply: str
    correct: bool


@dataclass(frozen=True)
class Accuracy:
    answered: tuple[Answered, ...]

    @property
    def correct(self) -> int:
        return sum(a.correct for a in self.answered)

    @property
    def questions(self) -> int:
        return len(self.answered)

    def lost_against(self, reference: Accuracy) -> list[str]:
        """Questions the reference answers right and this model does not."""
        return [
            mine.question.text
            for mine, theirs in zip(self.answered, reference.answered, strict=True)
            if theirs.correct and not mine.correct
        ]

    def as_dict(self) -> dict:
        return {
            "set": f"{DATA_ITEM}: capitals of the {self.questions} most populous countries",
            "correct": self.correct,
            "questions": self.questions,
            "wrong": [a.question.text for a in self.answered if not a.correct],
        }


def capital_questions(data_dir: str | Path, count: int = QUESTIONS) -> list[Question]:
    """The capitals of the ``count`` most populous countries in the folder's ``*.json`` files."""
    countries = []
    for path in sorted(Path(data_dir).glob("*.json")):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise AnswerSetError(f"{path.name}: not readable as JSON ({exc})") from None
        if not isinstance(entry, dict):
            raise AnswerSetError(f"{path.name}: a JSON object was expected")
        name, capital, population = entry.get("name"), entry.get("capital"), entry.get("population")
        if isinstance(name, str) and isinstance(capital, str) and capital.strip():
            people = population if isinstance(population, int) and population > 0 else 0
            countries.append((-people, name, capital.strip()))
    if len(countries) < count:
        raise AnswerSetError(
            f"{data_dir} has {len(countries)} countries with a capital, {count} were asked for"
        )
    return [
        Question(f"What is the capital of {name}?", (capital, *OTHER_NAMES.get(capital, ())))
        for _, name, capital in sorted(countries)[:count]
    ]


def normalize(text: str) -> str:
    """Lower case, accents off, every run of non-alphanumerics one space."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return " ".join(re.split(r"[^0-9a-z]+", plain.lower())).strip()


def is_correct(reply: str, answers: Sequence[str]) -> bool:
    said = f" {normalize(reply)} "
    return any(f" {normalize(answer)} " in said for answer in answers if normalize(answer))


def first_line(text: str) -> str:
    """What is graded of a reply: its first non-empty line."""
    return text.strip().split("\n")[0]


def question_ids(runner: SequenceRunner, question: str) -> list[int]:
    if runner.model.chat_template:
        return chat_prompt_ids(runner, question)
    return runner.model.tokenizer.encode(f"Question: {question}\nAnswer:", add_special_tokens=True).ids


def greedy_reply(
    runner: SequenceRunner,
    prompt_ids: Sequence[int],
    answers: Sequence[str] = (),
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> str:
    """The greedy reply up to EOS, the end of its first non-empty line, ``max_new_tokens``, or the
    first token after which it names one of ``answers`` (more text cannot make it wrong)."""
    eos = set(runner.model.manifest.tokenizer.eos_token_ids)
    tokenizer = runner.model.tokenizer
    runner.reset()
    logits = runner.step(list(prompt_ids))[-1]
    tokens: list[int] = []
    for _ in range(max_new_tokens):
        token = int(np.argmax(logits))
        if token in eos:
            break
        tokens.append(token)
        text = tokenizer.decode(tokens)
        if "\n" in text.strip() or is_correct(text, answers):
            break
        if len(tokens) < max_new_tokens:
            logits = runner.step([token])[-1]
    return first_line(tokenizer.decode(tokens))


def answer_accuracy(runner: SequenceRunner, questions: Sequence[Question]) -> Accuracy:
    answered = []
    for question in questions:
        reply = greedy_reply(runner, question_ids(runner, question.text), question.answers)
        answered.append(Answered(question, reply, is_correct(reply, question.answers)))
    return Accuracy(tuple(answered))
