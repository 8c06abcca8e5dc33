"""The grammar of a required call in the qwen_xml format (:mod:`clika_runtime.chat.tools.formats.qwen_xml`).

``<tool_call>``, ``<function=NAME>``, then per parameter ``<parameter=KEY>``, its value and
``</parameter>``, then ``</function>`` and ``</tool_call>``, each on its own line.

Values are text: a string parameter is free text within its length bounds (one of its ``enum``
when it has one) that cannot close the call early, any other type JSON under its schema, as the
format's reader (:mod:`clika_runtime.chat.tools.formats.xml_body`) types them back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from clika_runtime.chat.tools.formats.call_grammar import (
    LiteralTerm,
    arguments_schema,
    joined,
    json_term,
    keyword_items,
    listed,
)

PARAMETER_END = "\n</parameter>\n"  # as the format's own examples write it
MAX_TEXT_BOUND = 4096  # a text parameter's length bounds past this are not kept (lexer states)


def qwen_xml_call_rules(tools: list[dict[str, Any]], literal: LiteralTerm, parallel: bool) -> list[str]:
    """The rules of ``calls``: one ``<tool_call>`` block per call, several one per line."""
    opening, closing = literal("<tool_call>"), literal("</tool_call>")
    rules = [joined("call", '"\\n"', parallel), f'call: {opening} "\\n" function "\\n" {closing}']
    rules.append("function: " + " | ".join(f"function_{index}" for index in range(len(tools))))
    texts: dict[str, str] = {}  # one text rule per length bound
    for index, tool in enumerate(tools):
        parameters = keyword_items(arguments_schema(tool), lambda key, schema: _parameter(key, schema, texts))
        name = json.dumps(f"<function={tool['function']['name']}>\n")
        rules.append(f'function_{index}: {name} {listed(parameters, "")} "</function>"')
    for rule, bound in texts.items():
        rules.append(f"{rule}[suffix={json.dumps(PARAMETER_END)}]: {rule.upper()}")
        rules.append(
            f"{rule.upper()}: /(?s:.{bound})/ & ~/(?s:.*(<\\/function>|<\\/tool_call>|<parameter=).*)/"
        )
    return rules


def _parameter(key: str, schema: Mapping[str, Any], texts: dict[str, str]) -> str:
    head = json.dumps(f"<parameter={key}>\n")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(value, str) for value in enum):
        choices = " | ".join(json.dumps(value) for value in enum)
        return f"{head} ({choices}) {json.dumps(PARAMETER_END)}"
    if schema.get("type") not in ("string", None):
        return f"{head} {json_term(schema)} {json.dumps(PARAMETER_END)}"
    low, high = schema.get("minLength"), schema.get("maxLength")
    low = low if isinstance(low, int) and 0 <= low <= MAX_TEXT_BOUND else 0
    high = high if isinstance(high, int) and low <= high <= MAX_TEXT_BOUND else None
    bound = f"{{{low},{'' if high is None else high}}}"
    rule = f"text_{low}_{'any' if high is None else high}"
    texts[rule] = bound
    return f"{head} {rule}"  # the text runs to the parameter's end tag
