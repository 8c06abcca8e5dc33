"""Chat templates: rendering matches transformers' apply_chat_template, probes read what templates can do.

The reference is ``PreTrainedTokenizerFast.apply_chat_template(tokenize=False)``
on a tokenizer carrying the same template and special tokens. Templates for
families the project does not ship live in ``tests/templates``; the SmolLM2
and Qwen2.5-Coder templates are read from their GGUF files at test time.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
from repo_paths import TEMPLATES

from clika_runtime.chat.templates.chat_template import ChatTemplate, TemplateError, conversation_text

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
CLOCK = {
    "name": "get_time",
    "description": "The time in a zone",
    "parameters": {"type": "object", "properties": {}},
}


def _call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS = {
    "single": [{"role": "user", "content": "Hello there"}],
    "system": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    "multi_turn": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": 'Unicode: caf\u00e9 \u2603 and "quotes"'},
    ],
    "tool_round": [
        {"role": "user", "content": "Weather in Paris for 3 days?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("abc123def", "get_weather", {"city": "Paris", "days": 3})],
        },
        {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather", "content": "sunny, 24C"},
        {"role": "assistant", "content": "Sunny and 24C."},
        {"role": "user", "content": "And Rome?"},
    ],
    "tool_pending": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("xyz987uvw", "get_weather", {"city": "Paris"})],
        },
        {"role": "tool", "tool_call_id": "xyz987uvw", "name": "get_weather", "content": "rain"},
    ],
}
# The Qwen3-like template keeps reasoning only after the last user turn.
THINKING_HISTORY = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "Let me check.",
        "reasoning_content": "I should call the tool.",
        "tool_calls": [_call("c1", "get_weather", {"city": "Paris"})],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]
INLINE_THINKING_HISTORY = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello!"},
    {"role": "user", "content": "Bye"},
]


def _hf_tokenizer(source: str, special: dict[str, str]):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    vocab = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=vocab, chat_template=source, **special)


def _assert_same_as_transformers(
    source, special, messages, add_generation_prompt=True, tools=None, **variables
):
    ours = ChatTemplate(source, special_tokens=special).render(
        copy.deepcopy(messages), add_generation_prompt=add_generation_prompt, tools=tools, **variables
    )
    reference = _hf_tokenizer(source, special).apply_chat_template(
        copy.deepcopy(messages),
        tools=tools,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **variables,
    )
    assert ours == reference


# (template file, conversation, tools, template variables)
WRITTEN_CASES = [
    ("qwen3_like_thinking.jinja", "single", None, {}),
    ("qwen3_like_thinking.jinja", "system", [WEATHER], {}),
    ("qwen3_like_thinking.jinja", "multi_turn", None, {"enable_thinking": False}),
    ("qwen3_like_thinking.jinja", "tool_round", [WEATHER], {"enable_thinking": True}),
    ("qwen3_like_thinking.jinja", "tool_pending", [WEATHER], {"enable_thinking": False}),
    ("llama3_json_tools.jinja", "single", None, {}),
    ("llama3_json_tools.jinja", "system", [WEATHER], {}),
    ("llama3_json_tools.jinja", "tool_round", [WEATHER], {}),
    ("llama3_json_tools.jinja", "tool_pending", [WEATHER], {}),
    ("mistral_tools.jinja", "multi_turn", None, {}),
    ("mistral_tools.jinja", "tool_round", [WEATHER], {}),
    ("mistral_tools.jinja", "tool_pending", [WEATHER], {}),
    ("pythonic_tools.jinja", "system", [WEATHER], {}),
    ("pythonic_tools.jinja", "tool_round", [WEATHER], {}),
    ("qwen_xml_tools.jinja", "multi_turn", [WEATHER], {}),
    ("qwen_xml_tools.jinja", "tool_round", [WEATHER], {}),
    ("qwen_xml_tools.jinja", "tool_pending", [WEATHER], {}),
    ("always_thinking.jinja", "multi_turn", None, {}),
    ("opt_in_thinking.jinja", "multi_turn", None, {"enable_thinking": True}),
    ("effort_levels.jinja", "single", None, {"reasoning_effort": "minimal"}),
    ("adaptive_thinking.jinja", "multi_turn", None, {}),
]


@pytest.mark.parametrize(("template", "conversation", "tools", "variables"), WRITTEN_CASES)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_written_templates_render_like_transformers(
    template, conversation, tools, variables, add_generation_prompt
):
    source = (TEMPLATES / template).read_text(encoding="utf-8")
    messages = CONVERSATIONS[conversation]
    _assert_same_as_transformers(source, SPECIAL, messages, add_generation_prompt, tools, **variables)


@pytest.mark.parametrize("enable_thinking", [None, True, False])
@pytest.mark.parametrize("history", [THINKING_HISTORY, INLINE_THINKING_HISTORY])
def test_thinking_toggle_and_history_stripping_like_transformers(history, enable_thinking):
    source = (TEMPLATES / "qwen3_like_thinking.jinja").read_text(encoding="utf-8")
    variables = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    _assert_same_as_transformers(source, SPECIAL, history, True, [WEATHER], **variables)


def test_thinking_history_keeps_only_reasoning_after_the_last_user_turn():
    source = (TEMPLATES / "qwen3_like_thinking.jinja").read_text(encoding="utf-8")
    text = ChatTemplate(source).render(THINKING_HISTORY, tools=[WEATHER])
    assert "Two plus two is four." not in text
    assert "<think>\nI should call the tool.\n</think>\n\nLet me check." in text
    closed = ChatTemplate(source).render(THINKING_HISTORY, enable_thinking=False)
    assert closed.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_arguments_as_json_string_render_like_objects():
    source = (TEMPLATES / "qwen3_like_thinking.jinja").read_text(encoding="utf-8")
    template = ChatTemplate(source)
    as_object = template.render(CONVERSATIONS["tool_round"], tools=[WEATHER])
    wire = copy.deepcopy(CONVERSATIONS["tool_round"])
    wire[1]["tool_calls"][0]["function"]["arguments"] = '{"city": "Paris", "days": 3}'
    assert template.render(wire, tools=[WEATHER]) == as_object
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}' in as_object


def test_bare_function_tools_render_like_the_envelope():
    source = (TEMPLATES / "qwen3_like_thinking.jinja").read_text(encoding="utf-8")
    template = ChatTemplate(source)
    bare = template.render(CONVERSATIONS["single"], tools=[CLOCK])
    envelope = template.render(CONVERSATIONS["single"], tools=[{"type": "function", "function": CLOCK}])
    assert bare == envelope and '"name": "get_time"' in bare


# -- probes ---------------------------------------------------------------------------------

PROBES = [
    # template, tool_call_format, supports_tools, renders_tools, reasoning_mode
    ("qwen3_like_thinking.jinja", "hermes", True, True, "toggleable"),
    ("llama3_json_tools.jinja", "llama3_json", True, True, "never"),
    ("mistral_tools.jinja", "mistral", True, True, "never"),
    ("pythonic_tools.jinja", "pythonic", True, True, "never"),
    ("qwen_xml_tools.jinja", "qwen_xml", True, True, "never"),
    ("always_thinking.jinja", "generic", False, False, "always"),
    ("opt_in_thinking.jinja", "generic", False, False, "opt_in"),
    ("effort_levels.jinja", "generic", False, False, "always"),
    ("adaptive_thinking.jinja", "generic", False, False, "adaptive"),
]


@pytest.mark.parametrize(("template", "fmt", "supports_tools", "renders_tools", "mode"), PROBES)
def test_probes_read_what_the_template_does(template, fmt, supports_tools, renders_tools, mode):
    probed = ChatTemplate((TEMPLATES / template).read_text(encoding="utf-8"), special_tokens=SPECIAL)
    assert probed.tool_call_format == fmt
    assert probed.supports_tools is supports_tools
    assert probed.renders_tools is renders_tools
    assert probed.reasoning_mode == mode
    assert probed.supports_thinking is (mode != "never")


def test_tool_call_format_can_be_pinned_and_unknown_names_are_refused():
    source = (TEMPLATES / "opt_in_thinking.jinja").read_text(encoding="utf-8")
    assert ChatTemplate(source, tool_call_format="pythonic").tool_call_format == "pythonic"
    with pytest.raises(ValueError, match="unknown tool-call format 'yaml'"):
        ChatTemplate(source, tool_call_format="yaml")


# -- templates without a tools slot ---------------------------------------------------------


def test_tools_block_joins_the_system_turn_when_the_template_has_no_tools_slot():
    template = ChatTemplate((TEMPLATES / "opt_in_thinking.jinja").read_text(encoding="utf-8"))
    assert not template.renders_tools
    text = template.render(CONVERSATIONS["system"], tools=[WEATHER])
    assert text.startswith("<|im_start|>system\nYou are terse.\n\n# Tools\n")
    assert '"name": "get_weather"' in text and "<tool_call>" in text
    alone = template.render(CONVERSATIONS["single"], tools=[WEATHER])
    assert alone.startswith("<|im_start|>system\n# Tools\n")
    assert alone.endswith("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n")


def test_tool_history_is_folded_into_plain_turns_for_templates_that_ignore_it():
    template = ChatTemplate((TEMPLATES / "opt_in_thinking.jinja").read_text(encoding="utf-8"))
    text = template.render(CONVERSATIONS["tool_round"], tools=[WEATHER])
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny, 24C\n</tool_response><|im_end|>\n"
    ) in text


def test_conversation_text_without_a_template_flattens_role_lines():
    messages = CONVERSATIONS["multi_turn"]
    assert conversation_text(messages) == (
        "system: You are terse.\nuser: Hi\nassistant: Hello.\n"
        'user: Unicode: caf\u00e9 \u2603 and "quotes"\nassistant:'
    )
    template = ChatTemplate((TEMPLATES / "adaptive_thinking.jinja").read_text(encoding="utf-8"))
    assert conversation_text(messages, template) == template.render(messages)


# -- errors -----------------------------------------------------------------------------------


def test_syntax_error_names_the_line():
    with pytest.raises(TemplateError, match="line 2") as caught:
        ChatTemplate("{{ bos_token }}\n{{ messages | }}\n")
    assert caught.value.lineno == 2
    with pytest.raises(TemplateError, match="line 3: Unexpected end of template"):
        ChatTemplate("{{ bos_token }}\n{% if messages %}\nno endif")


def test_undefined_attribute_names_the_line_and_reason():
    source = "{% for m in messages %}\n{{ m.content }}\n{{ m.missing.deeper }}\n{% endfor %}"
    with pytest.raises(TemplateError) as caught:
        ChatTemplate(source).render(CONVERSATIONS["single"])
    assert caught.value.lineno == 3
    assert "missing" in caught.value.reason


def test_raise_exception_reaches_the_caller_with_its_message():
    template = ChatTemplate(
        (TEMPLATES / "mistral_tools.jinja").read_text(encoding="utf-8"), special_tokens=SPECIAL
    )
    bad_id = copy.deepcopy(CONVERSATIONS["tool_round"])
    bad_id[1]["tool_calls"][0]["id"] = "short"
    with pytest.raises(TemplateError, match="Tool call IDs should be alphanumeric") as caught:
        template.render(bad_id, tools=[WEATHER])
    assert caught.value.lineno is not None


def test_the_sandbox_refuses_python_internals():
    template = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(TemplateError):
        template.render(CONVERSATIONS["single"])


def test_bad_messages_are_refused_by_name():
    template = ChatTemplate((TEMPLATES / "adaptive_thinking.jinja").read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="message 1 needs a string 'role'"):
        template.render([{"role": "user", "content": "a"}, {"content": "b"}])
    with pytest.raises(ValueError, match="tool names must be unique"):
        template.render(CONVERSATIONS["single"], tools=[WEATHER, WEATHER])


def test_hf_environment_helpers_behave_like_transformers():
    source = (
        "{{ messages[0] | tojson(indent=2, sort_keys=True) }}|{{ '<&>' | tojson }}|"
        "{{ {'b': 1, 'a': 'é'} | tojson(ensure_ascii=True, separators=(',', ':')) }}|"
        "{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{{ m.role }}{% break %}{% endfor %}|"
        "{{ strftime_now('%Y') | length }}|{{ 'Ab'.upper() + 'x'.startswith('x') | string }}|"
        "{% set ns = namespace(n=0) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}|{{ dict(a=1) | tojson }}|"
        "{{ undefined_thing is defined }}"
    )
    _assert_same_as_transformers(source, SPECIAL, CONVERSATIONS["multi_turn"])


# -- the shipped models' templates, read from their GGUF files -----------------------------


@functools.lru_cache(maxsize=4)  # reading a GGUF's vocabulary takes seconds
def _gguf_template(path: Path) -> tuple[str, dict[str, str]]:
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(path))

    def text(key: str, index: int | None = None) -> str:
        field = reader.fields[key]
        part = field.data[0] if index is None else field.data[index]
        return bytes(field.parts[part]).decode("utf-8")

    def token_id(key: str) -> int:
        field = reader.fields[key]
        return int(field.parts[field.data[0]][0])

    special = {
        "bos_token": text("tokenizer.ggml.tokens", token_id("tokenizer.ggml.bos_token_id")),
        "eos_token": text("tokenizer.ggml.tokens", token_id("tokenizer.ggml.eos_token_id")),
    }
    return text("tokenizer.chat_template"), special


@pytest.mark.slow
@pytest.mark.parametrize("conversation", ["single", "system", "multi_turn"])
def test_smollm2_template_renders_like_transformers(smollm2_gguf, conversation):
    source, special = _gguf_template(smollm2_gguf)
    for add_generation_prompt in (True, False):
        _assert_same_as_transformers(source, special, CONVERSATIONS[conversation], add_generation_prompt)
    probed = ChatTemplate(source, special_tokens=special)
    assert (probed.supports_tools, probed.reasoning_mode, probed.tool_call_format) == (
        False,
        "never",
        "generic",
    )


@pytest.mark.slow
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
def test_qwen_coder_template_renders_like_transformers(qwen05_gguf, conversation):
    source, special = _gguf_template(qwen05_gguf)
    for tools in (None, [WEATHER, {"type": "function", "function": CLOCK}]):
        _assert_same_as_transformers(source, special, CONVERSATIONS[conversation], True, tools)
    probed = ChatTemplate(source, special_tokens=special)
    assert (probed.supports_tools, probed.renders_tools, probed.tool_call_format) == (True, True, "hermes")
    assert probed.reasoning_mode == "never"


# Templates whose source names no call syntax: the format is read back from a rendered call.
_UNMARKED_HEAD = (
    "{% if tools %}<|system|>{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|end|>{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>"
)
_UNMARKED_TAIL = "{% else %}{{ m.content }}{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
UNMARKED = {
    "llama3_json": _UNMARKED_HEAD
    + "{% if m.tool_calls %}{% for c in m.tool_calls %}"
    + "{{ {'name': c.function.name, 'parameters': c.function.arguments} | tojson }}{% endfor %}"
    + _UNMARKED_TAIL,
    "pythonic": _UNMARKED_HEAD
    + "{% if m.tool_calls %}[{% for c in m.tool_calls %}{{ c.function.name }}("
    + "{% for k, v in c.function.arguments.items() %}{{ k }}={{ v | tojson }}{% endfor %}){% endfor %}]"
    + _UNMARKED_TAIL,
}


@pytest.mark.parametrize("fmt", sorted(UNMARKED))
def test_format_is_read_back_from_a_rendered_call(fmt):
    template = ChatTemplate(UNMARKED[fmt])
    assert template.supports_tools and template.tool_call_format == fmt
    text = template.render(CONVERSATIONS["tool_pending"], tools=[WEATHER])
    assert "get_weather" in text
