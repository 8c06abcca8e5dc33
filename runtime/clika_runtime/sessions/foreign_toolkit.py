"""A toolnexus ``Toolkit`` (or any toolkit of that shape) as the runtime's own Toolkit.

toolnexus is not a dependency: a toolkit is recognised by its shape (``tools()`` listing tools
with ``name``, ``description``, ``input_schema`` and an async ``execute(args, ctx)`` returning a
result with ``output``, ``is_error`` and ``metadata``; ``skills_prompt()``). Each tool becomes a
:class:`~clika_runtime.chat.tools.toolkit.Tool` whose call awaits the tool's ``execute``; a result
that suspends (``metadata["pending"]``, toolnexus's §10 requests) is kept in ``pending`` so the
loop running it can stop there; the skills prompt is kept as ``instructions``.
"""

from __future__ import annotations

from typing import Any

from clika_runtime.chat.tools.toolkit import Toolkit, make_tool


class ToolFailed(Exception):
    """A foreign tool reported an error: the model reads its output as the call's error."""


class AdaptedToolkit(Toolkit):
    """The runtime's Toolkit over a foreign one (see the module docstring)."""

    def __init__(self, foreign: Any) -> None:
        super().__init__()
        self.foreign = foreign
        self.instructions = _skills_prompt(foreign)
        self.pending: list[Any] = []  # suspensions the calls returned, oldest first
        for item in foreign.tools():
            self.add(
                make_tool(
                    self._caller(item),
                    name=item.name,
                    description=item.description or "",
                    schema=item.input_schema or {"type": "object", "properties": {}},
                )
            )

    def _caller(self, item: Any) -> Any:
        async def call(**arguments: Any) -> str:
            result = await item.execute(arguments, None)
            suspension = (getattr(result, "metadata", None) or {}).get("pending")
            if suspension is not None:
                self.pending.append(suspension)
            if getattr(result, "is_error", False) and suspension is None:
                raise ToolFailed(result.output)
            return result.output

        return call


def as_toolkit(toolkit: Any) -> Toolkit:
    """``toolkit`` as the runtime's Toolkit: itself, an adapted foreign one, or ValueError."""
    if toolkit is None:
        return Toolkit()
    if isinstance(toolkit, Toolkit):
        return toolkit
    if callable(getattr(toolkit, "tools", None)) and callable(getattr(toolkit, "execute", None)):
        return AdaptedToolkit(toolkit)
    raise ValueError(
        f"toolkit must be a Toolkit (clika_runtime.chat.tools.toolkit or a toolnexus one), got {type(toolkit).__name__}"
    )


def toolkit_instructions(toolkit: Toolkit) -> str:
    """What a toolkit asks to join the system turn (a toolnexus toolkit's skills catalog)."""
    return getattr(toolkit, "instructions", "") or ""


def _skills_prompt(foreign: Any) -> str:
    prompt = getattr(foreign, "skills_prompt", None)
    return prompt() if callable(prompt) else ""
