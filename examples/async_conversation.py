"""A multi-turn conversation held in-process with the async API.

    python examples/async_conversation.py [MODEL] [--store conversations.db]

MODEL is an exported model folder, a .gguf file or a catalog name (default:
smollm2-135m-instruct, fetched and exported on first use). The conversation
streams its replies, keeps its history, and with ``--store`` is saved to a
SQLite file after every turn: run the example again with the same file and
the conversation goes on where it stopped.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from clika_runtime import modelverse
from clika_runtime.sessions import AsyncChat, InMemoryStore, SQLiteStore

TURNS = [
    "Hi! My name is Ada and I live by the sea.",
    "What is my name?",
    "Suggest one thing I could do this weekend.",
]


def model_folder(spec: str) -> Path:
    """An exported model folder for ``spec`` (exported into the model cache when needed)."""
    from clika_runtime.store import resolve

    return resolve(spec, say=print).folder


async def converse(model: modelverse.GenerativeModel, store_path: str | None) -> None:
    store = SQLiteStore(store_path) if store_path else InMemoryStore()
    chat = AsyncChat(model, store=store, system="You are a helpful assistant. Answer briefly.")
    try:
        session = await chat.open("example")  # the saved conversation, or a new one
        session.set_options(temperature=0.0, max_new_tokens=64)  # for every turn of the session
        for prompt in TURNS:
            print(f"\n> {prompt}")
            async for event in session.stream(prompt):
                if event.type == "text":
                    print(event.text, end="", flush=True)
                elif event.type == "error":
                    print(f"\n[error: {event.text}]")
                elif event.type == "result":
                    result = event.result
                    usage = result.usage
                    print(
                        f"\n[turn {result.num_turns}: {usage['input_tokens']} tokens read "
                        f"({usage['cache_read_input_tokens']} from cache), {usage['output_tokens']} written, "
                        f"{result.duration_ms} ms]"
                    )
        # A per-turn override applies to that turn only; fork explores without touching the original.
        side = session.fork()
        reply = await side.send("Say it again in three words.", max_new_tokens=12)
        print(f"\n[fork {side.session_id[:8]}] {reply.result}")
        print(f"[the conversation holds {len(session.messages)} messages; the fork {len(side.messages)}]")
    finally:
        chat.close()
        if isinstance(store, SQLiteStore):
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--store", default=None, help="a SQLite file that keeps the conversation")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads")
    args = parser.parse_args()
    model = modelverse.load(model_folder(args.model), threads=args.threads)
    try:
        asyncio.run(converse(model, args.store))
    finally:
        model.close()


if __name__ == "__main__":
    main()
