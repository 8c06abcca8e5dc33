"""A toolnexus Conversation talking to ``clika serve`` (the OpenAI-compatible server).

    clika serve smollm2-135m-instruct --model-id smollm2          # in one terminal
    python examples/toolnexus_conversation.py --model smollm2      # in another

The conversation keeps its transcript in memory (``convo.messages``) and sends
the whole of it each turn. Then ``client.ask(..., id=...)`` keeps a conversation
durably: the client's ConversationStore is clika's SQLiteStore (its ``get`` /
``save`` have the shape toolnexus calls), so running the example again with the
same ``--store`` file continues that conversation. Needs ``pip install toolnexus``.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from toolnexus import create_client

from clika_runtime.sessions import SQLiteStore


async def converse(base_url: str, model: str, store_path: str) -> dict:
    request = {"temperature": 0, "max_tokens": 48}  # added to every request's body
    client = create_client(
        base_url=base_url, style="openai", model=model, api_key="local", request_params=request
    )
    convo = client.conversation()
    first = await convo.send("My name is Ada and my favourite number is 7.")
    second = await convo.send("What is my name?")
    print(f"> turn 1: {first.text}\n> turn 2: {second.text}")
    in_memory = {
        "users": [m["content"] for m in convo.messages if m.get("role") == "user"],
        "prompt_tokens": [first.usage["prompt_tokens"], second.usage["prompt_tokens"]],
    }
    convo.reset()

    with SQLiteStore(store_path) as store:
        durable = create_client(
            base_url=base_url,
            style="openai",
            model=model,
            api_key="local",
            request_params=request,
            store=store,
        )
        answer = await durable.ask("Remember: the meeting is on Tuesday.", id="ada")
        print(f"> durable turn: {answer.text}")
        saved = await store.get("ada")
    return {"in_memory": in_memory, "durable_messages": len(saved or [])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/v1", help="the server's base URL")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the served model id")
    parser.add_argument("--store", default="toolnexus-conversations.db", help="the SQLite file for ask()")
    args = parser.parse_args()
    summary = asyncio.run(converse(args.url, args.model, args.store))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
