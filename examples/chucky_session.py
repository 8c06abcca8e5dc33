"""The Chucky SDK's session and error-handling examples, on a local model: only the import
changed, and the snippets put in one ``main`` so that they run as a script.

    CLIKA_MODEL=smollm2-135m-instruct python examples/chucky_session.py
"""

import asyncio

from clika_runtime.compat.chucky import Chucky, get_assistant_text


async def main():
    client = Chucky(url="wss://conjure.chucky.cloud/ws", token="...")
    session = client.create_session(model="claude-sonnet-4-5-20250929")

    # First turn
    await session.send("Hello, I am Alice")
    async for msg in session.stream():
        if msg.get("type") == "assistant":
            text = get_assistant_text(msg)
            print(text)
        if msg.get("type") == "result":
            break

    # Second turn - maintains conversation context
    await session.send("What is my name?")
    async for msg in session.stream():
        if msg.get("type") == "result":
            print(msg.get("result"))  # "Your name is Alice."

    await session.close()

    try:
        result = await client.prompt("Hello")
        if result.get("subtype") == "error":
            print(f"Error: {result.get('result')}")
        else:
            print(result.get("result"))
    except RuntimeError as e:
        # Connection errors, timeouts
        print(f"Connection error: {e}")
    except Exception as e:
        print(f"Unexpected error: {e}")

    await client.close()


asyncio.run(main())
