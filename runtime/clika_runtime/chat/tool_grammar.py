"""The grammar a required tool call is decoded under: exactly a valid call of the offered tools.

For the model's tool-call format the reply may hold only: the call's opening
markup, a name among the offered tools, arguments valid under that tool's
JSON schema (embedded as ``%json{...}`` in a Lark grammar), one call or
several as the format joins them (``parallel``), and then the end. A template
with a reasoning channel may think first (``<think>...</think>``, required
when the prompt opened the block). A tool's schema is closed
(``additionalProperties: false``, bounded numbers) when its function says
``strict``, as OpenAI's strict mode asks; otherwise it applies as written.

Markers that are single special tokens of the vocabulary (Qwen's
``<tool_call>``, Mistral's ``[TOOL_CALLS]``) are named by token id
(:func:`clika_runtime.grammar.vocabulary.lark_literal`); elsewhere they are
text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.reasoning import THINK_END, THINK_START
from clika_runtime.chat.tool_choice import ToolChoice
from clika_runtime.grammar.constraint import Constraint, GrammarError, closed_schema, compile_constraint
from clika_runtime.grammar.vocabulary import grammar_vocabulary, lark_literal

if TYPE_CHECKING:
    from clika_runtime.chat.templates import ChatTemplate
    from clika_runtime.text.tokenizer import Tokenizer

# The separators the formats' own examples use (and the models were trained on).
COMMA = '", "'
PARAMETER_END = "\n</parameter>\n"
MAX_TEXT_BOUND = 4096  # a text parameter's length bounds past this are not kept (lexer states)
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def tool_call_grammar(
    format_name: str,
    tools: Sequence[Mapping[str, Any]],
    vocabulary: Any,
    *,
    parallel: bool = True,
    reasoning: str = "",
) -> str:
    """The Lark grammar of a reply that is only calls of ``tools`` in ``format_name``.

    ``reasoning``: "" (no reasoning channel), "optional" (the reply may open with a
    ``<think>`` block) or "open" (the prompt opened one: the reply starts inside it).
    """
    build = _FORMATS.get(format_name)
    if build is None:
        raise GrammarError(f"tool calls in the {format_name!r} format cannot be constrained")
    if not tools:
        raise GrammarError("a required tool call needs tools")
    literal = _Literals(vocabulary)
    rules = build(list(tools), literal, parallel)
    return "\n".join([f"start: {_reasoning_prefix(reasoning, literal, rules)}calls", *rules])


def tool_call_constraint(
    format_name: str,
    tools: Sequence[Mapping[str, Any]],
    vocabulary: Any,
    *,
    parallel: bool = True,
    reasoning: str = "",
    field: str = "tools",
) -> Constraint:
    """:func:`tool_call_grammar` compiled within the grammar engine's bounds (GrammarError naming
    ``field`` and the problem otherwise)."""
    grammar = tool_call_grammar(format_name, tools, vocabulary, parallel=parallel, reasoning=reasoning)
    return compile_constraint("lark", grammar, "tool call", field)


class _Literals:
    """Lark terms for the literal pieces of a call, special tokens named by id."""

    def __init__(self, vocabulary: Any) -> None:
        self.vocabulary = vocabulary

    def __call__(self, text: str) -> str:
        return lark_literal(self.vocabulary, text)


def _reasoning_prefix(reasoning: str, literal: _Literals, rules: list[str]) -> str:
    if not reasoning:
        return ""
    end = literal(THINK_END)
    if end.startswith("<["):  # a special token: free text cannot contain it
        rules.append(f"thought: /(?s:.*)/ {end}")
    else:
        rules.append(f"thought[suffix={json.dumps(THINK_END)}]: /(?s:.*)/")
    rules.append(r"gap: /[ \t\r\n]*/")
    if reasoning == "open":
        return "thought gap "
    return f"({literal(THINK_START)} thought gap)? "


# -- the arguments of one tool -------------------------------------------------------------------


def arguments_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema a call's arguments must match: the function's ``parameters`` (any object when
    it has none), closed when the function is ``strict``."""
    function = tool["function"]
    name = function["name"]
    schema = function.get("parameters")
    if schema is None:
        schema = {"type": "object", "properties": {}}
    if not isinstance(schema, Mapping):
        raise GrammarError(f"tool {name!r}: 'parameters' must be a JSON schema object")
    if schema.get("type", "object") != "object":
        raise GrammarError(f"tool {name!r}: 'parameters' must describe an object, not {schema.get('type')!r}")
    return closed_schema(schema) if function.get("strict") is True else dict(schema)


def _json(schema: Mapping[str, Any]) -> str:
    return "%json" + json.dumps({**schema, "x-guidance": JSON_STYLE}, ensure_ascii=False)


def _call_object(tools: list[dict[str, Any]], arguments_key: str) -> dict[str, Any]:
    """The JSON schema of one call object: ``{"name": <an offered name>, <arguments_key>: {...}}``."""
    shapes = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["function"]["name"]},
                arguments_key: arguments_schema(tool),
            },
            "required": ["name", arguments_key],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    return shapes[0] if len(shapes) == 1 else {"anyOf": shapes}


def _joined(item: str, separator: str, parallel: bool) -> str:
    return f"calls: {item} ({separator} {item})*" if parallel else f"calls: {item}"


# -- the formats ---------------------------------------------------------------------------------


def _tagged(tools: list[dict[str, Any]], literal: _Literals, parallel: bool) -> list[str]:
    """hermes / generic: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``."""
    opening, closing = literal("<tool_call>"), literal("</tool_call>")
    return [
        _joined("call", '"\\n"', parallel),
        f'call: {opening} "\\n" {_json(_call_object(tools, "arguments"))} "\\n" {closing}',
    ]


def _llama3(tools: list[dict[str, Any]], literal: _Literals, parallel: bool) -> list[str]:
    """llama3_json: ``{"name": ..., "parameters": {...}}``, several joined by ``; ``."""
    return [_joined("call", '"; "', parallel), f"call: {_json(_call_object(tools, 'parameters'))}"]


def _mistral(tools: list[dict[str, Any]], literal: _Literals, parallel: bool) -> list[str]:
    """mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``."""
    listing: dict[str, Any] = {"type": "array", "items": _call_object(tools, "arguments"), "minItems": 1}
    if not parallel:
        listing["maxItems"] = 1
    return [f"calls: {literal('[TOOL_CALLS]')} {_json(listing)}"]


def _pythonic(tools: list[dict[str, Any]], literal: _Literals, parallel: bool) -> list[str]:
    """pythonic: ``[get_weather(city="Paris"), now()]``: keyword arguments with JSON literal values."""
    more = ' (", " call)*' if parallel else ""
    rules = [f'calls: "[" call{more} "]"']
    rules.append("call: " + " | ".join(f"call_{index}" for index in range(len(tools))))
    for index, tool in enumerate(tools):
        arguments = _keyword_items(
            arguments_schema(tool), lambda key, value: f"{json.dumps(key + '=')} {_json(value)}"
        )
        name = json.dumps(tool["function"]["name"] + "(")
        rules.append(f'call_{index}: {name} {_listed(arguments, COMMA)} ")"')
    return rules


def _qwen_xml(tools: list[dict[str, Any]], literal: _Literals, parallel: bool) -> list[str]:
    """qwen_xml: ``<tool_call>``, ``<function=NAME>``, then per parameter ``<parameter=KEY>``, its
    value and ``</parameter>``, then ``</function>`` and ``</tool_call>``, each on its own line.

    Values are text: a string parameter is free text within its length bounds (one of its ``enum``
    when it has one) that cannot close the call early, any other type JSON under its schema, as the
    format's reader types them back."""
    opening, closing = literal("<tool_call>"), literal("</tool_call>")
    rules = [_joined("call", '"\\n"', parallel), f'call: {opening} "\\n" function "\\n" {closing}']
    rules.append("function: " + " | ".join(f"function_{index}" for index in range(len(tools))))
    texts: dict[str, str] = {}  # one text rule per length bound
    for index, tool in enumerate(tools):
        parameters = _keyword_items(
            arguments_schema(tool), lambda key, schema: _xml_parameter(key, schema, texts)
        )
        name = json.dumps(f"<function={tool['function']['name']}>\n")
        rules.append(f'function_{index}: {name} {_listed(parameters, "")} "</function>"')
    for rule, bound in texts.items():
        rules.append(f"{rule}[suffix={json.dumps(PARAMETER_END)}]: {rule.upper()}")
        rules.append(
            f"{rule.upper()}: /(?s:.{bound})/ & ~/(?s:.*(<\\/function>|<\\/tool_call>|<parameter=).*)/"
        )
    return rules


def _xml_parameter(key: str, schema: Mapping[str, Any], texts: dict[str, str]) -> str:
    head = json.dumps(f"<parameter={key}>\n")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(value, str) for value in enum):
        choices = " | ".join(json.dumps(value) for value in enum)
        return f"{head} ({choices}) {json.dumps(PARAMETER_END)}"
    if schema.get("type") not in ("string", None):
        return f"{head} {_json(schema)} {json.dumps(PARAMETER_END)}"
    low, high = schema.get("minLength"), schema.get("maxLength")
    low = low if isinstance(low, int) and 0 <= low <= MAX_TEXT_BOUND else 0
    high = high if isinstance(high, int) and low <= high <= MAX_TEXT_BOUND else None
    bound = f"{{{low},{'' if high is None else high}}}"
    rule = f"text_{low}_{'any' if high is None else high}"
    texts[rule] = bound
    return f"{head} {rule}"  # the text runs to the parameter's end tag


def _keyword_items(
    schema: Mapping[str, Any], item: Callable[[str, Mapping[str, Any]], str]
) -> list[tuple[str, bool]]:
    """One Lark term per declared property, required ones first: (term, required)."""
    properties = schema.get("properties") or {}
    required = [key for key in schema.get("required") or () if key in properties]
    optional = [key for key in properties if key not in required]
    return [(item(key, properties[key]), True) for key in required] + [
        (item(key, properties[key]), False) for key in optional
    ]


def _listed(items: list[tuple[str, bool]], separator: str) -> str:
    """The items in order, the required ones always, each optional one or not, ``separator`` (a Lark
    term, or "" for none) between the ones present; "" when there are none."""
    required = [term for term, needed in items if needed]
    optional = [term for term, needed in items if not needed]
    glue = f" {separator} " if separator else " "
    lead = f"{separator} " if separator else ""
    if required:
        return glue.join(required) + "".join(f" ({lead}{term})?" for term in optional)
    if not optional:
        return ""
    # No required item: the first one present opens the list, the later ones follow it.
    choices = [
        term + "".join(f" ({lead}{later})?" for later in optional[first + 1 :])
        for first, term in enumerate(optional)
    ]
    return "(" + " | ".join(choices) + ")?"


_FORMATS: dict[str, Callable[[list[dict[str, Any]], _Literals, bool], list[str]]] = {
    "hermes": _tagged,
    "generic": _tagged,
    "llama3_json": _llama3,
    "mistral": _mistral,
    "pythonic": _pythonic,
    "qwen_xml": _qwen_xml,
}


def required_call_constraint(
    template: ChatTemplate | None,
    prompt: str,
    tools: Sequence[Mapping[str, Any]] | None,
    choice: ToolChoice,
    tokenizer: Tokenizer,
    vocab_size: int,
    *,
    parallel: bool = True,
    field: str = "tools",
) -> Constraint | None:
    """The constraint a turn needs when ``choice`` requires a call of ``tools`` (None otherwise):
    the template's call format, after a reasoning block where ``prompt`` opened one."""
    if not choice.required or not tools or template is None:
        return None
    reasoning = ""
    if template.supports_thinking:
        reasoning = "open" if template.opens_reasoning(prompt) else "optional"
    return tool_call_constraint(
        template.tool_call_format,
        tools,
        grammar_vocabulary(tokenizer, vocab_size),
        parallel=parallel,
        reasoning=reasoning,
        field=field,
    )
