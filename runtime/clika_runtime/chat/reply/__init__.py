"""A model's reply as the chat layer reads it: its channels, its events, how it ended.

* :mod:`~clika_runtime.chat.reply.reasoning`: the ``<think>`` channel and its switch;
* :mod:`~clika_runtime.chat.reply.parser`: :class:`ReplyParser`, a reply's channels (reasoning,
  visible text, tool calls) together;
* :mod:`~clika_runtime.chat.reply.events`: the one reply vocabulary every front end reads;
* :mod:`~clika_runtime.chat.reply.outcome`: :class:`ChatOutcome`, how a reply ended;
* :mod:`~clika_runtime.chat.reply.streamed`: ``generate``'s replies, streamed or a batch.
"""
