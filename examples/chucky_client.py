"""The Chucky SDK's complete example, on a local model: only the import changed.

    CLIKA_MODEL=qwen2.5-coder-0.5b-instruct python examples/chucky_client.py

The hosted model's name in the code stands for the local model CLIKA_MODEL
names (a model folder or a cached model's name); the token and URL are kept
as the SDK's code has them and never used: nothing leaves the machine.
"""

import asyncio

from clika_runtime.compat.chucky import (
    Chucky,
    create_budget,
    create_token,
    get_assistant_text,
    text_result,
    tool,
)

# Create a token (server-side only)
token = create_token(
    user_id="user-123",
    project_id="your-project-id",  # From app.chucky.cloud
    secret="your-hmac-secret",  # From app.chucky.cloud
    budget=create_budget(ai_dollars=1.00, compute_hours=1, window="day"),
)


# Define a tool
@tool("get_time", "Get current time")
async def get_time() -> dict:
    from datetime import datetime

    return text_result(datetime.now().isoformat())


async def main():
    # Create client
    client = Chucky(
        url="wss://conjure.chucky.cloud/ws",
        token=token,
        model="claude-sonnet-4-5-20250929",
    )

    try:
        # Simple prompt
        result = await client.prompt("What is 2 + 2?")
        print(f"Answer: {result.get('result')}")
        print(f"Cost: ${result.get('total_cost_usd', 0):.4f}")

        # Multi-turn session with tools
        session = client.create_session(tools=[get_time])

        await session.send("What time is it?")
        async for msg in session.stream():
            if msg.get("type") == "assistant":
                print(get_assistant_text(msg))
            if msg.get("type") == "result":
                print(f"Done: {msg.get('result')}")
                break

        await session.close()

    finally:
        await client.close()


asyncio.run(main())
