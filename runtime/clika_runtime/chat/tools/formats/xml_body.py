"""The XML call body of Qwen3-Coder style templates.

::

    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>

Parameter values are text; the offered tool's JSON schema says which to read as
numbers, booleans, objects or arrays (a value that does not read as its type
stays text, as the model wrote it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall, parameter_types
from clika_runtime.chat.tools.formats.base import ParseContext

FUNCTION_START = "<function="
FUNCTION_END = "</function>"
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER = re.compile(
    r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|\Z)", re.DOTALL
)


def parse_xml_calls(body: str, raw: str, context: ParseContext) -> list[ToolCall] | None:
    """The calls in a body of ``<function=...>`` elements; None when there are none or text is left over."""
    calls = []
    leftover = _FUNCTION.sub("", body).strip()
    if leftover:
        return None
    for match in _FUNCTION.finditer(body):
        name = match.group(1).strip()
        if not name:
            return None
        schema = parameter_types(context.tools, name)
        arguments = {
            key.strip(): _typed_value(_trim_newlines(value), schema.get(key.strip()))
            for key, value in _PARAMETER.findall(match.group(2))
        }
        calls.append(ToolCall(id=context.new_id(), name=name, arguments=arguments, raw=raw))
    return calls or None


def format_xml_call(name: str, arguments: Mapping[str, Any]) -> str:
    """One call written as the XML body."""
    parameters = "".join(
        f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}\n"
        "</parameter>\n"
        for key, value in arguments.items()
    )
    return f"<function={name}>\n{parameters}</function>"


def _trim_newlines(value: str) -> str:
    # The template puts the value on its own line; only that framing newline goes.
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _typed_value(text: str, schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    kinds = set(kind) if isinstance(kind, list) else {kind}
    if "null" in kinds and text.strip().lower() in ("null", "none"):
        return None
    try:
        if kinds & {"integer"}:
            return int(text.strip())
        if kinds & {"number"}:
            number = float(text.strip())
            return int(number) if number.is_integer() and "." not in text else number
        if kinds & {"boolean"}:
            lowered = text.strip().lower()
            if lowered in ("true", "false"):
                return lowered == "true"
            return text
        if kinds & {"object", "array"}:
            return json.loads(text)
    except (ValueError, json.JSONDecodeError):
        return text
    return text
