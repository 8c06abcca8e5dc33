"""Foundry Local's Session shape on a local model: a request, a streamed reply left at a break,
session options, and a chat session over the same API.

    CLIKA_MODEL=smollm2-135m-instruct python examples/foundry_local_session.py

CLIKA_MODEL is an exported model folder, a .gguf file or a catalog name (default:
smollm2-135m-instruct, fetched and exported on first use).
"""

import asyncio
import os

from clika_runtime import modelverse
from clika_runtime.compat.foundry_errors import FoundryLocalError
from clika_runtime.compat.foundry_local import Item, Request, RequestOptions, Session
from clika_runtime.compat.foundry_sessions import ChatSession


async def main(model):
    session = await Session.new(model)
    await session.set_options(RequestOptions(temperature=0.0, max_output_tokens=48))
    response = await session.process_request(Request([Item("What is 2 + 2?")]))
    print(f"reply: {response.text}")

    stream = session.process_streaming_request(Request(["Tell me a long story."]))
    pieces = []
    async for item in stream:
        pieces.append(item.text)
        if len(pieces) == 3:
            break  # the reply stops here
    print(f"streamed {len(pieces)} items, then stopped")

    try:
        await session.process_request(Request(["word " * 20000]))
    except FoundryLocalError as error:  # also a ValueError
        print(f"refused: {type(error).__name__}")
    await session.close()

    chat = await ChatSession.new(model, system="You are terse.")
    print(f"chat: {await chat.send('Name a colour.', RequestOptions(temperature=0.0, max_output_tokens=16))}")
    await chat.close()


if __name__ == "__main__":
    loaded = modelverse.load(os.environ.get("CLIKA_MODEL", "smollm2-135m-instruct"))
    try:
        asyncio.run(main(loaded))
    finally:
        loaded.close()
