"""Tool calls: their definitions, the syntaxes models write them in, and running them.

* :mod:`~clika_runtime.chat.tools.definitions`: tool definitions normalized, the :class:`ToolCall` type;
* :mod:`~clika_runtime.chat.tools.formats`: one module per call syntax, and the registry;
* :mod:`~clika_runtime.chat.tools.stream`: a reply's calls parsed as it streams;
* :mod:`~clika_runtime.chat.tools.choice`: ``tool_choice`` (auto, none, required, a named function);
* :mod:`~clika_runtime.chat.tools.grammar`: a required call's grammar;
* :mod:`~clika_runtime.chat.tools.toolkit`: Python functions as tools, their schemas from
  :mod:`~clika_runtime.chat.tools.schema`;
* :mod:`~clika_runtime.chat.tools.loop`: the tool-running loop every session kind drives,
  :mod:`~clika_runtime.chat.tools.turns` its driver over a synchronous session, and
  :mod:`~clika_runtime.chat.tools.own_thread` a blocking call a cancelled caller does not wait for.
"""
