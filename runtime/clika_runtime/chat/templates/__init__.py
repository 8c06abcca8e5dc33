"""Chat templates: a checkpoint's Jinja template, rendered the way Hugging Face renders it.

* :mod:`~clika_runtime.chat.templates.chat_template`: :class:`ChatTemplate`, probed at load
  (tool-call format, tools block, reasoning channel), and a conversation's text;
* :mod:`~clika_runtime.chat.templates.messages`: messages as plain data in the shape templates read;
* :mod:`~clika_runtime.chat.templates.render`: a model folder's template, and a prompt with a
  request's reasoning switch folded in;
* :mod:`~clika_runtime.chat.templates.sandbox`: the render process (time, output and memory limits),
  running :mod:`~clika_runtime.chat.templates.worker` in the sandboxed jinja2 environment of
  :mod:`~clika_runtime.chat.templates.environment`;
* :mod:`~clika_runtime.chat.templates.errors`: :class:`TemplateError` and its limit variant.
"""
