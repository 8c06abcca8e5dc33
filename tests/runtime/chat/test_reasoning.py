"""The reasoning channel: splitting <think> blocks (whole and streamed) and the request switch."""

from __future__ import annotations

import random

import pytest
from repo_paths import TEMPLATES

from clika_runtime.chat.reply.reasoning import (
    CONTENT,
    REASONING,
    ReasoningProfile,
    ReasoningStream,
    prompt_opens_reasoning,
    split_reasoning,
)
from clika_runtime.chat.templates.chat_template import ChatTemplate

# (reply, reply starts inside the block, reasoning, content)
SPLITS = [
    ("Plain answer.", False, "", "Plain answer."),
    ("<think>\nLet me think.\n</think>\n\nThe answer is 4.", False, "Let me think.", "The answer is 4."),
    ("  <think>a</think>b", False, "a", "b"),
    ("Let me think.\n</think>\n\nFour.", True, "Let me think.", "Four."),
    ("\nStill thinking when the budget ran out", True, "Still thinking when the budget ran out", ""),
    ("<think>\nunclosed", False, "unclosed", ""),
    ("<think></think>Empty block.", False, "", "Empty block."),
    ("Answer first <think>not a block</think>", False, "", "Answer first <think>not a block</think>"),
    ("<think>x < y and </thin is not the end</think>ok", False, "x < y and </thin is not the end", "ok"),
    ("<thinking>is another word", False, "", "<thinking>is another word"),
    ("<thi", False, "", "<thi"),
    ("a</think>b</think>c", True, "a", "b</think>c"),
    ("", True, "", ""),
]


@pytest.mark.parametrize(("reply", "inside", "reasoning", "content"), SPLITS)
def test_split_whole_reply(reply, inside, reasoning, content):
    assert split_reasoning(reply, start_in_reasoning=inside) == (reasoning, content)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("reply", "inside", "reasoning", "content"), SPLITS)
def test_split_streamed_reply_matches(reply, inside, reasoning, content, seed):
    rng = random.Random(seed)
    stream = ReasoningStream(start_in_reasoning=inside)
    pieces = []
    pos = 0
    while pos < len(reply):
        size = rng.randint(1, 5)
        pieces += stream.feed(reply[pos : pos + size])
        pos += size
    pieces += stream.finish()
    assert "".join(text for channel, text in pieces if channel == REASONING) == reasoning
    assert "".join(text for channel, text in pieces if channel == CONTENT) == content
    # Markers never leak into a channel.
    assert all(text for _, text in pieces)
    assert not any("</think>" in text for channel, text in pieces if channel == REASONING)


def test_stream_reports_where_it_is():
    stream = ReasoningStream()
    assert stream.feed("<think>hm") == [(REASONING, "hm")]
    assert stream.in_reasoning
    assert stream.feed("m</think>\n\nDone") == [(REASONING, "m"), (CONTENT, "Done")]
    assert not stream.in_reasoning


@pytest.mark.parametrize(
    ("prompt", "opens"),
    [
        ("<|im_start|>assistant\n<think>\n", True),
        ("<|im_start|>assistant\n<think>", True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        ("<|im_start|>assistant\n", False),
        ("<think>old</think> user text <think>\n", True),
        ("<think>\nsomething already written", False),
    ],
)
def test_prompt_opens_reasoning(prompt, opens):
    assert prompt_opens_reasoning(prompt) is opens


# -- the switch -------------------------------------------------------------------------------


def _template(name: str) -> ChatTemplate:
    return ChatTemplate(
        (TEMPLATES / name).read_text(encoding="utf-8"),
        special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
    )


USER = [{"role": "user", "content": "hi"}]


def test_toggleable_model_switches_off_and_the_prompt_says_so():
    template = _template("qwen3_like_thinking.jinja")
    assert template.render(USER, enable_thinking=False).endswith("<think>\n\n</think>\n\n")
    assert template.render(USER, enable_thinking=True) == template.render(USER)
    assert template.render(USER, reasoning_effort="none") == template.render(USER, enable_thinking=False)
    assert template.render(USER, reasoning_effort="high") == template.render(USER)


def test_opt_in_model_opens_the_block_only_when_asked():
    template = _template("opt_in_thinking.jinja")
    assert not template.opens_reasoning(template.render(USER))
    assert template.opens_reasoning(template.render(USER, enable_thinking=True))


def test_always_model_refuses_the_off_switch_by_name():
    template = _template("always_thinking.jinja")
    assert template.opens_reasoning(template.render(USER))
    with pytest.raises(ValueError, match="no off switch.*'always'"):
        template.render(USER, enable_thinking=False)
    with pytest.raises(ValueError, match="no off switch"):
        template.render(USER, reasoning_effort="none")
    assert template.render(USER, enable_thinking=True) == template.render(USER)


def test_adaptive_model_refuses_the_off_switch():
    with pytest.raises(ValueError, match="'adaptive'"):
        _template("adaptive_thinking.jinja").render(USER, enable_thinking=False)


def test_effort_levels_reach_the_template_and_unknown_levels_are_named():
    template = _template("effort_levels.jinja")
    assert "Reasoning: high" in template.render(USER, reasoning_effort="high")
    assert "Reasoning: medium" in template.render(USER)
    assert "as little as possible" in template.render(USER, reasoning_effort="minimal")
    with pytest.raises(ValueError, match="unknown reasoning_effort 'extreme'"):
        template.render(USER, reasoning_effort="extreme")


def test_model_without_a_channel():
    template = _template("llama3_json_tools.jinja")
    assert template.render(USER, enable_thinking=False) == template.render(USER)  # nothing to switch off
    with pytest.raises(ValueError, match="no reasoning channel"):
        template.render(USER, enable_thinking=True)
    with pytest.raises(ValueError, match="unknown reasoning_effort 'high'"):
        template.render(USER, reasoning_effort="high")


def test_switch_values_are_checked():
    profile = ReasoningProfile("toggleable", ("enable_thinking",))
    with pytest.raises(ValueError, match="enable_thinking must be True, False or None"):
        profile.template_variables(enable_thinking="no")
    with pytest.raises(ValueError, match="contradicts"):
        profile.template_variables(enable_thinking=False, reasoning_effort="high")
    with pytest.raises(ValueError, match="unknown reasoning mode 'sometimes'"):
        ReasoningProfile("sometimes")
    assert profile.template_variables() == {}
    assert profile.template_variables(enable_thinking=True) == {"enable_thinking": True}
