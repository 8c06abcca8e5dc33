"""Grammars, schemas and chat templates from requests and checkpoints, fuzzed.

Property for a constraint: a compiled grammar, or a GrammarError (a ValueError
naming the field); for a template: rendered text within the output limit, or
a TemplateError (TemplateLimitError past a limit), with the render process
serving the next case either way.
"""

from __future__ import annotations

from fuzz_budget import budget, count
from hypothesis import given
from hypothesis import strategies as st

from clika_runtime.chat.templates.sandbox import RenderLimits, TemplateError, render_template
from clika_runtime.grammar.constraint import Constraint, GrammarError, constraint_from

KEYWORDS = [
    "type", "properties", "items", "enum", "const", "anyOf", "oneOf", "allOf", "required", "pattern",
    "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "$ref", "$defs",
    "additionalProperties", "format", "multipleOf", "not", "if", "then", "prefixItems",
]  # fmt: skip
TYPES = ["object", "array", "string", "integer", "number", "boolean", "null", "nope"]
PATTERNS = ["^(a+)+(b+)+(c+)+(a|aa)*$", "[a-z]{1,9}", "(", "\\d+", ".*", "[^", "a{99999}", "(?=x)"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=8),
    st.sampled_from(TYPES), st.sampled_from(PATTERNS), st.just("#/$defs/a"),
)  # fmt: skip
schemas = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYWORDS) | st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=25,
)
formats = st.one_of(
    st.builds(lambda s: {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}, schemas),
    st.builds(lambda s, strict: {"type": "json_schema", "json_schema": {"schema": s, "strict": strict}},
              st.dictionaries(st.sampled_from(KEYWORDS), schemas, max_size=4), st.booleans()),
    st.builds(lambda p: {"type": "regex", "pattern": p}, st.sampled_from(PATTERNS) | st.text(max_size=20)),
    st.builds(lambda g: {"type": "lark", "grammar": g}, st.text(max_size=40) | st.just("start: /[a-z]+/")),
    st.builds(lambda g: {"type": "gbnf", "grammar": g}, st.text(max_size=40) | st.just('root ::= "a"+')),
    st.builds(lambda s: {"type": "json_object", "schema": s}, schemas),
    schemas,
)  # fmt: skip


@given(value=formats)
@budget(700)
def test_any_format_compiles_or_is_a_grammar_error(value):
    count("grammars and schemas (llguidance)")
    try:
        constraint = constraint_from(value, field="response_format")
    except GrammarError as error:
        assert "response_format" in str(error) or "JSON schema" in str(error)
        return
    assert constraint is None or (isinstance(constraint, Constraint) and constraint.grammar)


SNIPPETS = [
    "{{ messages }}", "{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}", "{{", "}}",
    "{%", "%}", "{% if x %}", "{% endif %}", "{{ 'a' * 99999999 }}", "{% for i in range(10**9) %}x{% endfor %}",
    "{{ messages[0].content | upper }}", "{{ raise_exception('no') }}", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "{{ ''.__class__ }}", "{{ x.y.z }}", "{% set ns = namespace(a=1) %}{{ ns.a }}", "{{ tools | tojson }}",
    "{{ 10 ** 10 ** 10 }}", "{# c #}", "\n", "text", "{{ add_generation_prompt }}", "{{ bos_token }}",
]  # fmt: skip
messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant", "tool", "x"]),
            "content": st.text(max_size=20),
        }
    ),
    max_size=4,
)
LIMITS = RenderLimits(seconds=5.0, max_chars=100_000, max_bytes=256 << 20)


@given(
    source=st.lists(st.sampled_from(SNIPPETS) | st.text(max_size=10), min_size=1, max_size=8), chat=messages
)
@budget(400)
def test_any_template_renders_within_limits_or_is_a_template_error(source, chat):
    count("chat template sandbox (templates and messages)")
    context = {"messages": chat, "add_generation_prompt": True, "bos_token": "<s>", "tools": None}
    try:
        text = render_template("".join(source), context, limits=LIMITS)
    except TemplateError as error:
        assert str(error)
        return
    assert isinstance(text, str) and len(text) <= LIMITS.max_chars
