"""The chat layer: templates, tool calls, reasoning (model-independent), and sessions.

* :mod:`~clika_runtime.chat.templates.chat_template`: the checkpoint's Jinja chat template in a sandbox, probed at load;
* :mod:`~clika_runtime.chat.tools.definitions`: tool definitions and the :class:`ToolCall` type;
* :mod:`~clika_runtime.chat.tools.formats`: one module per call syntax, and the registry;
* :mod:`~clika_runtime.chat.tools.stream`: the streaming call parser;
* :mod:`~clika_runtime.chat.reply.reasoning`: the ``<think>`` channel and its switch;
* :mod:`~clika_runtime.chat.reply.parser`: a reply's channels (reasoning, visible text, calls) together;
* :mod:`~clika_runtime.chat.turn`: the one turn path (:func:`prepare_turn` builds a :class:`Turn`) every front end takes;
* :mod:`~clika_runtime.chat.tools.toolkit`: Python functions as tools (:func:`tool`, :class:`Toolkit`),
  their schemas from type hints and docstrings (:mod:`~clika_runtime.chat.tools.schema`);
* :mod:`~clika_runtime.chat.tools.loop`: the tool-running loop (hooks, ``max_turns``) every session kind drives;
* :mod:`~clika_runtime.chat.history`: a history handed in by a caller, checked;
* :mod:`~clika_runtime.chat.session`: :class:`ChatSession` (imported from there: it needs the engine).
"""

from clika_runtime.chat.reply.parser import ReplyParser, reply_parser_for
from clika_runtime.chat.reply.reasoning import (
    REASONING_MODES,
    ReasoningProfile,
    ReasoningStream,
    split_reasoning,
)
from clika_runtime.chat.templates.chat_template import ChatTemplate, TemplateError, conversation_text
from clika_runtime.chat.tools.definitions import ToolCall, normalize_tools
from clika_runtime.chat.tools.formats import FORMATS, ToolCallFormat, detect_format, get_format
from clika_runtime.chat.tools.loop import LoopHooks, LoopResult, Veto
from clika_runtime.chat.tools.stream import ParsedReply, ToolCallStream, parse_tool_calls
from clika_runtime.chat.tools.toolkit import Tool, Toolkit, ToolOutput, text_result, tool

__all__ = [
    "FORMATS",
    "REASONING_MODES",
    "ChatTemplate",
    "LoopHooks",
    "LoopResult",
    "ParsedReply",
    "ReasoningProfile",
    "ReplyParser",
    "ReasoningStream",
    "TemplateError",
    "Tool",
    "ToolCall",
    "ToolCallFormat",
    "ToolCallStream",
    "ToolOutput",
    "Toolkit",
    "Veto",
    "conversation_text",
    "detect_format",
    "get_format",
    "normalize_tools",
    "parse_tool_calls",
    "reply_parser_for",
    "split_reasoning",
    "text_result",
    "tool",
]
