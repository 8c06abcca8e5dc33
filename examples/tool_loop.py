"""The tool loop: the model calls a Python function, the runtime runs it, the model reads the
result and answers. Needs a model that takes tools (supports_tools), e.g. Qwen2.5-Coder.

    CLIKA_MODEL=qwen2.5-coder-0.5b-instruct python examples/tool_loop.py
"""

import asyncio
import json
import os

from clika_runtime import modelverse
from clika_runtime.chat.tools.loop import LoopHooks
from clika_runtime.chat.tools.toolkit import Toolkit, tool
from clika_runtime.sessions import AsyncChat


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: The city name
    """
    return json.dumps({"city": city, "temperature_c": 18, "condition": "light rain"})


async def main(model):
    chat = AsyncChat(model, system="You are a helpful assistant. Use the tools when they help.")
    hooks = LoopHooks(before_tool=lambda call: print(f"calling {call.name}({dict(call.arguments)})"))
    convo = chat.conversation(Toolkit([get_weather]), max_turns=3, hooks=hooks)
    result = await convo.send("What is the weather in Paris right now?", temperature=0.0, max_new_tokens=96)
    print(f"tool calls: {result.tool_call_count}, model turns: {result.turns}, status: {result.run_status}")
    print(f"answer: {result.text}")


if __name__ == "__main__":
    loaded = modelverse.load(os.environ.get("CLIKA_MODEL", "qwen2.5-coder-0.5b-instruct"))
    try:
        asyncio.run(main(loaded))
    finally:
        loaded.close()
