"""A step that fails is an error no caller can mistake for an empty reply: ``generate`` and
``generate_batch`` raise GenerationError (the report says what failed), a streamed reply raises
at its end, and the model serves the next request normally.

The failure is forced by a step runner that raises in place of ONNX Runtime for one step."""

from __future__ import annotations

import pytest

from clika_runtime.engine.errors import GenerationError


class FailingOnce:
    """Wraps the engine's step runner; the next ``run`` raises as a lost device would."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.timing = inner.timing
        self.armed = True

    def run(self, plan, before_call=None):
        if self.armed:
            self.armed = False
            raise RuntimeError("the device went away")
        return self.inner.run(plan, before_call)


@pytest.fixture
def failing(tiny_model):
    core = tiny_model.engine.core
    runner = FailingOnce(core.executor)
    core.executor = runner
    yield runner
    core.executor = runner.inner


def test_generate_raises_and_the_next_request_runs(tiny_model, failing):
    with pytest.raises(GenerationError, match="the device went away") as caught:
        tiny_model.generate("hello", max_new_tokens=4)
    assert caught.value.report.finish_reason == "error"
    assert tiny_model.report.finish_reason == "error"
    assert tiny_model.generate("hello", max_new_tokens=4, temperature=0.0) == tiny_model.generate(
        "hello", max_new_tokens=4, temperature=0.0
    )


def test_a_streamed_reply_raises_at_its_end(tiny_model, failing):
    stream = tiny_model.stream_generate("hello", max_new_tokens=4)
    with pytest.raises(GenerationError):
        list(stream)
    assert stream.report.error and "device went away" in stream.report.error


def test_streamed_responses_end_on_the_error_then_raise(tiny_model, failing):
    stream = tiny_model.stream_responses("hello", max_new_tokens=4)
    last = next(stream)  # the step fails before any token: one chunk, carrying the error
    assert last.finish_reason == "error" and last.report is stream.report and not last.token_ids
    with pytest.raises(GenerationError, match="the device went away"):
        next(stream)


def test_a_batch_names_the_prompt_that_failed(tiny_model, failing):
    with pytest.raises(GenerationError, match=r"prompt \d: the model failed"):
        tiny_model.generate_batch(["one", "two"], max_new_tokens=4)
