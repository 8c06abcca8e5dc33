"""Chat templates: a checkpoint's Jinja template rendered the way Hugging Face renders it.

Templates are untrusted code: they compile and render in a separate render
process with a time, output and memory limit
(:mod:`~clika_runtime.chat.templates.sandbox`), inside jinja2's
ImmutableSandboxedEnvironment with exactly the environment ``transformers``
gives them (:mod:`~clika_runtime.chat.templates.environment`), so a template
renders the same text here as in ``apply_chat_template`` and a hostile one
ends in a :class:`TemplateError` (:class:`TemplateLimitError` past a limit).
The messages reach it as plain data (:mod:`~clika_runtime.chat.templates.messages`).

At load :class:`ChatTemplate` probes what the template can do, from its source
text and by rendering small probe conversations: the tool-call format its model
speaks, whether it renders offered tools itself (otherwise the format's tools
block joins the system turn), and how its reasoning channel behaves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from clika_runtime.chat.reply.reasoning import (
    THINK_END,
    THINK_START,
    ReasoningProfile,
    effort_levels_in,
    prompt_opens_reasoning,
)
from clika_runtime.chat.templates.errors import TemplateError, TemplateLimitError
from clika_runtime.chat.templates.messages import (
    content_text,
    plain_conversation_text,
    plain_data,
    prepare_messages,
)
from clika_runtime.chat.templates.sandbox import (
    DEFAULT_LIMITS,
    RenderLimits,
    compile_template,
    render_template,
)
from clika_runtime.chat.tools.definitions import normalize_tools
from clika_runtime.chat.tools.formats import FORMATS, ToolCallFormat, detect_format, get_format
from clika_runtime.chat.tools.stream import parse_tool_calls

_SWITCH_VARIABLES = ("enable_thinking", "thinking")
_PROBE_NAME = "clika_probe_tool_4f1c"
_PROBE_RESULT = "clika_probe_result_9b2e"
_PROBE_SYSTEM = "clika_probe_system_7d3a"
_PROBE_CALL_ID = "probe0001"  # 9 alphanumerics: Mistral templates check call ids
# Strict formats first: hermes also reads bare call objects, so it would claim llama 3's.
_READ_BACK_ORDER = ("mistral", "qwen_xml", "pythonic", "llama3_json", "hermes")
_PROBE_PARAMETERS = {"type": "object", "properties": {"x": {"type": "string", "description": "probe"}}}


class ChatTemplate:
    """A checkpoint's chat template, compiled in the sandbox and probed at load.

    ``special_tokens`` are the variables transformers passes from the
    tokenizer (``bos_token``, ``eos_token``, ...). ``tool_call_format`` pins a
    registered format instead of probing one. ``limits`` bound every compile
    and render (time, output length, memory).

    ``render`` and the probed properties block while the render process works
    (thread-safe, GIL released): an event loop calls them off the loop, or
    calls ``probe`` once at load so the properties are known before serving.
    """

    def __init__(
        self,
        source: str,
        *,
        special_tokens: Mapping[str, str] | None = None,
        tool_call_format: str | None = None,
        name: str = "chat template",
        limits: RenderLimits = DEFAULT_LIMITS,
    ) -> None:
        self.source = source
        self.name = name
        self.limits = limits
        self.special_tokens = dict(special_tokens or {})
        self.variables = compile_template(source, name=name, limits=limits)
        self._limit_reached = False  # once a probe hits a limit, the other probes are not tried
        self._pinned_format = get_format(tool_call_format) if tool_call_format else None

    # -- what the template can do -------------------------------------------------------------

    @cached_property
    def format(self) -> ToolCallFormat:
        """The registered format the model's calls are read with.

        A pinned format wins; else the template's source text names one; else a
        probe history with one call is rendered and every format tries to read
        the call back from the assistant's turn; else ``generic``.
        """
        if self._pinned_format is not None:
            return self._pinned_format
        named = detect_format(self.source)
        if named.name != "generic" or not self.supports_tools:
            return named
        return self._format_by_rendering() or named

    def _format_by_rendering(self) -> ToolCallFormat | None:
        user = {"role": "user", "content": "hi"}
        call = {
            "id": _PROBE_CALL_ID,
            "type": "function",
            "function": {"name": _PROBE_NAME, "arguments": {"x": "1"}},
        }
        opened = self._probe([user])
        context = {
            **self.special_tokens,
            "messages": [user, {"role": "assistant", "content": "", "tool_calls": [call]}],
        }
        try:
            whole = self._render(
                {**context, "tools": None, "documents": None, "add_generation_prompt": False}
            )
        except TemplateError:
            return None
        if not opened or not whole.startswith(opened):
            return None
        turn = whole[len(opened) :]
        tool = [{"type": "function", "function": {"name": _PROBE_NAME, "parameters": _PROBE_PARAMETERS}}]
        for name in _READ_BACK_ORDER:
            fmt = FORMATS[name]
            if any(call.name == _PROBE_NAME for call in parse_tool_calls(turn, fmt, tool).calls):
                return fmt
        return None

    @property
    def tool_call_format(self) -> str:
        """The name of the format the model's calls are read with."""
        return self.format.name

    @property
    def supports_tools(self) -> bool:
        """True when the template takes tool definitions (it reads a ``tools`` variable)."""
        return "tools" in self.variables

    @cached_property
    def renders_tools(self) -> bool:
        """True when the template itself renders offered tools into the prompt."""
        tools = [
            {
                "type": "function",
                "function": {"name": _PROBE_NAME, "description": "probe", "parameters": _PROBE_PARAMETERS},
            }
        ]
        return _PROBE_NAME in self._probe([{"role": "user", "content": "hi"}], tools=tools)

    @cached_property
    def renders_tool_calls(self) -> bool:
        """True when the template renders an assistant turn's ``tool_calls`` and tool results."""
        call = {"id": _PROBE_CALL_ID, "type": "function", "function": {"name": _PROBE_NAME, "arguments": {}}}
        probe = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": _PROBE_CALL_ID, "name": _PROBE_NAME, "content": _PROBE_RESULT},
        ]
        text = self._probe(probe)
        return _PROBE_NAME in text and _PROBE_RESULT in text

    @cached_property
    def accepts_system(self) -> bool:
        """True when the template renders a system turn."""
        probe = [{"role": "system", "content": _PROBE_SYSTEM}, {"role": "user", "content": "hi"}]
        return _PROBE_SYSTEM in self._probe(probe)

    @cached_property
    def reasoning(self) -> ReasoningProfile:
        """How the model's reasoning channel behaves, probed by rendering the generation prompt."""
        switches = tuple(name for name in _SWITCH_VARIABLES if name in self.variables)
        levels = effort_levels_in(self.source) if "reasoning_effort" in self.variables else ()
        probe = [{"role": "user", "content": "hi"}]
        default = self._probe(probe)
        if switches:
            on = self._probe(probe, **dict.fromkeys(switches, True))
            off = self._probe(probe, **dict.fromkeys(switches, False))
            if on != off:
                mode = "opt_in" if default == off else "toggleable"
                return ReasoningProfile(mode, switches, levels)
        if prompt_opens_reasoning(default) or levels:
            return ReasoningProfile("always", (), levels)
        knows_channel = THINK_START in self.source or THINK_END in self.source
        if knows_channel or "reasoning_content" in self.source:
            return ReasoningProfile("adaptive", (), levels)
        return ReasoningProfile("never", (), levels)

    @property
    def reasoning_mode(self) -> str:
        """ "never", "always", "toggleable", "opt_in" or "adaptive" (see ReasoningProfile)."""
        return self.reasoning.mode

    @property
    def supports_thinking(self) -> bool:
        """True when the model produces a reasoning channel (in any mode but "never")."""
        return self.reasoning.supports_thinking

    def probe(self) -> ChatTemplate:
        """Run every probe now (at load), so later reads of the probed properties render nothing."""
        _ = (self.format, self.renders_tools, self.renders_tool_calls, self.accepts_system, self.reasoning)
        return self

    # -- rendering ------------------------------------------------------------------------------

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        **variables: Any,
    ) -> str:
        """The prompt text for ``messages``.

        ``tools`` (OpenAI envelope or bare function objects) go to the template
        when it renders them, else the format's tools block joins the system
        turn. ``enable_thinking`` / ``reasoning_effort`` are checked against the
        model's reasoning channel and become the variables its template reads
        (ValueError for an unknown level or an off switch the model lacks);
        other keyword arguments reach the template as they are.
        """
        switch = self.reasoning.template_variables(
            variables.pop("enable_thinking", None), variables.pop("reasoning_effort", None)
        )
        prepared = prepare_messages(messages)
        offered = normalize_tools(tools)
        if offered and not self.renders_tools:
            prepared = self._with_tools_block(prepared, offered)
            offered = None
        if any(message.get("tool_calls") or message["role"] == "tool" for message in prepared):
            if not self.renders_tool_calls:
                prepared = self._fold_tool_turns(prepared)
        if documents is not None and any(not isinstance(doc, Mapping) for doc in documents):
            raise ValueError("documents must be mappings (e.g. {'title': ..., 'text': ...})")
        context = {
            **self.special_tokens,
            **plain_data(variables),
            **switch,
            "messages": prepared,
            "tools": offered,
            "documents": plain_data(documents),
            "add_generation_prompt": add_generation_prompt,
        }
        return self._render(context)

    def opens_reasoning(self, prompt: str) -> bool:
        """True when ``prompt`` (rendered by this template) leaves the reasoning block open."""
        return prompt_opens_reasoning(prompt)

    def _render(self, context: dict[str, Any]) -> str:
        return render_template(self.source, context, name=self.name, limits=self.limits)

    def _probe(self, messages: list[dict[str, Any]], tools: Any = None, **variables: Any) -> str:
        """A probe render; a template that refuses the probe yields '' (the feature is absent)."""
        context = {
            **self.special_tokens,
            **variables,
            "messages": messages,
            "tools": tools,
            "documents": None,
            "add_generation_prompt": True,
        }
        if self._limit_reached:
            return ""
        try:
            return self._render(context)
        except TemplateLimitError:
            self._limit_reached = True  # each probe would wait out the same limit
            return ""
        except TemplateError:
            return ""

    def _with_tools_block(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        block = self.format.tools_block(tools)
        first = messages[0] if messages else None
        if first is not None and first["role"] == "system" and isinstance(first.get("content"), str):
            return [{**first, "content": f"{first['content']}\n\n{block}"}, *messages[1:]]
        if self.accepts_system:
            return [{"role": "system", "content": block}, *messages]
        for index, message in enumerate(messages):  # no system turn: the first user turn carries it
            if message["role"] == "user" and isinstance(message.get("content"), str):
                changed = {**message, "content": f"{block}\n\n{message['content']}"}
                return [*messages[:index], changed, *messages[index + 1 :]]
        return messages

    def _fold_tool_turns(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Calls and tool results as plain turns, for templates that render neither."""
        folded: list[dict[str, Any]] = []
        for message in messages:
            if message.get("tool_calls"):
                text = "\n".join(
                    part
                    for part in (
                        message.get("content") or "",
                        self.format.format_calls(message["tool_calls"]),
                    )
                    if part
                )
                rest = {key: value for key, value in message.items() if key != "tool_calls"}
                folded.append({**rest, "content": text})
            elif message["role"] == "tool":
                result = self.format.format_tool_result(
                    content_text(message.get("content")), message.get("name", "")
                )
                if folded and folded[-1].get("_tool_results"):
                    folded[-1]["content"] += "\n" + result
                else:
                    folded.append({"role": "user", "content": result, "_tool_results": True})
            else:
                folded.append(message)
        return [
            {key: value for key, value in message.items() if key != "_tool_results"} for message in folded
        ]


def conversation_text(
    messages: Sequence[Mapping[str, Any]], template: ChatTemplate | None = None, **variables: Any
) -> str:
    """The text a model reads for a conversation: the template's rendering, else ``role: content`` lines."""
    if template is None:
        return plain_conversation_text(messages)
    return template.render(messages, add_generation_prompt=True, **variables)
