"""The grammar a required tool call is decoded under: exactly a valid call of the offered tools.

For the model's tool-call format the reply may hold only: the call's opening
markup, a name among the offered tools, arguments valid under that tool's
JSON schema (embedded as ``%json{...}`` in a Lark grammar), one call or
several as the format joins them (``parallel``), and then the end. A template
with a reasoning channel may think first (``<think>...</think>``, required
when the prompt opened the block).

Each format owns the rules of its calls (``ToolCallFormat.call_rules``, built
from :mod:`clika_runtime.chat.tools.formats.call_grammar`); this module looks the
format up, adds the ``start`` rule and the reasoning block, and compiles the
grammar. Markers that are single special tokens of the vocabulary (Qwen's
``<tool_call>``, Mistral's ``[TOOL_CALLS]``) are named by token id
(:func:`clika_runtime.grammar.vocabulary.lark_literal`); elsewhere they are
text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.reply.reasoning import THINK_END, THINK_START
from clika_runtime.chat.tools.choice import ToolChoice
from clika_runtime.chat.tools.formats import FORMATS
from clika_runtime.chat.tools.formats.call_grammar import arguments_schema
from clika_runtime.grammar.constraint import Constraint, GrammarError, compile_constraint
from clika_runtime.grammar.vocabulary import grammar_vocabulary, lark_literal

if TYPE_CHECKING:
    from clika_runtime.chat.templates.chat_template import ChatTemplate
    from clika_runtime.text.tokenizer import Tokenizer

__all__ = ["arguments_schema", "required_call_constraint", "tool_call_grammar"]


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
    fmt = FORMATS.get(format_name)
    if fmt is None or fmt.call_rules is None:
        raise GrammarError(f"tool calls in the {format_name!r} format cannot be constrained")
    if not tools:
        raise GrammarError("a required tool call needs tools")
    literal = _Literals(vocabulary)
    rules = fmt.call_rules(list(tools), literal, parallel)
    return "\n".join([f"start: {_reasoning_prefix(reasoning, literal, rules)}calls", *rules])


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
    vocabulary = grammar_vocabulary(tokenizer, vocab_size)
    grammar = tool_call_grammar(
        template.tool_call_format, tools, vocabulary, parallel=parallel, reasoning=reasoning
    )
    # Compiled within the grammar engine's bounds: a GrammarError names ``field`` and the problem.
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
