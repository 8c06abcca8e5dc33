"""The chat layer: templates, tool calls, replies (model-independent), and sessions.

* :mod:`~clika_runtime.chat.templates`: the checkpoint's Jinja chat template in a sandbox, probed at load;
* :mod:`~clika_runtime.chat.tools`: tool definitions and call formats, the streaming call parser,
  Python functions as tools (:func:`tool`, :class:`Toolkit`) and the tool-running loop
  (hooks, ``max_turns``) every session kind drives;
* :mod:`~clika_runtime.chat.reply`: a reply's channels (the ``<think>`` channel, visible text,
  calls) together, its events and how it ended;
* :mod:`~clika_runtime.chat.turn`: the one turn path (:func:`prepare_turn` builds a :class:`Turn`) every front end takes;
* :mod:`~clika_runtime.chat.history`: a history handed in by a caller, checked;
  :mod:`~clika_runtime.chat.history_turns` the turns a session writes into it;
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
