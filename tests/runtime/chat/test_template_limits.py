"""Hostile chat templates: rendering is bounded in time, output size and memory.

A template is untrusted code from a checkpoint. Whatever it does (loop for
ever, allocate gigabytes at compile time or while rendering, recurse without
end), loading and rendering it ends with a ``TemplateError`` naming the
problem, and the next template renders normally.
"""

from __future__ import annotations

import pytest

from clika_runtime.chat.templates.chat_template import ChatTemplate, TemplateError
from clika_runtime.chat.templates.sandbox import RenderLimits, TemplateLimitError

HELLO = [{"role": "user", "content": "hi"}]
PLAIN = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
# 10^10 empty iterations: no output, no call the sandbox sees, only time.
LOOPING = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}" + PLAIN
SHORT = RenderLimits(seconds=1.0, max_chars=1_000_000, max_bytes=512 * 1024 * 1024)


def test_a_looping_template_is_cut_off_and_the_next_one_renders() -> None:
    template = ChatTemplate(LOOPING, limits=SHORT)
    with pytest.raises(TemplateLimitError, match="longer than 1 s"):
        template.render(HELLO)
    assert ChatTemplate(PLAIN, limits=SHORT).render(HELLO) == "<user>hi<a>"


def test_probes_of_a_looping_template_give_up_after_the_first_cut() -> None:
    template = ChatTemplate(LOOPING, limits=SHORT)
    # Every probe would loop: the first one hits the limit, the rest are skipped.
    assert template.reasoning_mode == "never"
    assert not template.accepts_system
    assert not template.renders_tools
    assert template.tool_call_format == "generic"
    with pytest.raises(TemplateLimitError):
        template.render(HELLO)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("{{ range(10**9) | list }}", id="range"),
        pytest.param("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", id="recursive-macro"),
        pytest.param("{{ '{0:>1000000000}'.format(1) }}", id="format-width"),
        pytest.param("{{ '%1000000000d' % 1 }}", id="percent-width"),
        pytest.param("{{ 'a' * 1000000000 }}", id="constant-folded-repeat"),
        pytest.param("{{ 'x' | center(1000000000) }}", id="constant-folded-filter"),
        pytest.param("{{ 10 ** 100000000 }}", id="huge-power"),
        pytest.param("{% set n = namespace(s='ab') %}{% for i in range(40) %}{% set n.s = n.s ~ n.s %}{% endfor %}"
                     "{{ n.s | length }}", id="doubling"),
        pytest.param("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", id="long-output"),
    ],
)  # fmt: skip
def test_hostile_templates_fail_with_a_template_error(source: str) -> None:
    with pytest.raises(TemplateError):
        ChatTemplate(source, limits=SHORT).render(HELLO)
    assert ChatTemplate(PLAIN, limits=SHORT).render(HELLO) == "<user>hi<a>"


def test_output_longer_than_the_limit_is_named() -> None:
    source = "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}"
    with pytest.raises(TemplateLimitError, match="more than 1000000 characters"):
        ChatTemplate(source, limits=SHORT).render(HELLO)


def test_a_template_too_large_to_be_a_template_is_refused() -> None:
    with pytest.raises(TemplateError, match="characters"):
        ChatTemplate("x" * 2_000_000, limits=SHORT)


def test_deeply_nested_source_is_a_syntax_error_not_a_crash() -> None:
    with pytest.raises(TemplateError):
        ChatTemplate("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", limits=SHORT)


def test_export_refuses_a_looping_template_by_name(tmp_path, make_tiny_hf) -> None:
    from clika_export.api import export
    from clika_export.checkpoint import CheckpointError

    source = tmp_path / "looping"
    make_tiny_hf(source, "llama")
    (source / "chat_template.jinja").write_text(LOOPING)
    with pytest.raises(CheckpointError, match="looping: the chat template: .*longer than"):
        export(source, tmp_path / "out", "fp32", progress=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["looping"]  # nothing half-written


def test_the_render_process_ignores_ctrl_c_and_a_render_interrupted_in_its_wait_is_not_answered_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os
    import signal

    from clika_runtime.chat.templates import sandbox as template_sandbox

    def render(text: str) -> str:
        return template_sandbox.render_template("{{ text }}", {"text": text})

    assert render("first") == "first"
    process = template_sandbox._process(template_sandbox.DEFAULT_LIMITS.max_bytes)._proc
    os.kill(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C would send to its process group
    assert render("second") == "second" and process.poll() is None  # it took no notice

    real = template_sandbox._read_frame
    waits = iter([KeyboardInterrupt])

    def interrupted(fd: int, deadline: float) -> bytes:
        error = next(waits, None)
        if error is not None:  # the interrupt lands while the render's reply is awaited
            raise error
        return real(fd, deadline)

    monkeypatch.setattr(template_sandbox, "_read_frame", interrupted)
    with pytest.raises(KeyboardInterrupt):
        render("lost")
    assert render("third") == "third"  # not the interrupted render's reply
