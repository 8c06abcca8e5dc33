"""The worked weather exchange the real-model tool-calling tests show Qwen2.5-Coder-0.5B.

Shown one worked exchange in the system text, the 0.5B model calls ``get_weather`` and then
answers from the result; the example's numbers (Rome, 25 degrees, sunny) differ from the
results the tests hand back, so an answer quoting those read them from the tool turn.
"""

from __future__ import annotations

# One worked exchange in the template's own markup (Rome, 25 degrees, sunny).
SYSTEM = (
    "You are a weather assistant. Example of a conversation:\n"
    "User: How is the weather in Rome? Use celsius.\n"
    'Assistant: <tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}\n'
    "</tool_call>\n"
    'User: <tool_response>\n{"temperature": 25, "unit": "celsius", "condition": "sunny"}\n</tool_response>\n'
    "Assistant: It is 25 degrees Celsius and sunny in Rome."
)
QUESTION = "What is the weather like in Paris right now? Use celsius."
