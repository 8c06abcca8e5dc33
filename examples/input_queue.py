"""A request written in pieces: each piece is prefilled as it arrives, and decoding starts when
the queue is closed, so the reply is not held up by reading the whole prompt at the end.

    CLIKA_MODEL=smollm2-135m-instruct python examples/input_queue.py
"""

import asyncio
import os

from clika_runtime import modelverse
from clika_runtime.compat.foundry_local import Request, RequestOptions, Session

REPORT = [
    "The harbour opened in spring. ",
    "Fishing boats returned with record catches. ",
    "A storm in autumn closed it for a week. ",
]


async def main(model):
    session = await Session.new(model)
    queue = session.create_input_queue()
    options = RequestOptions(temperature=0.0, max_output_tokens=32)
    request = Request(["Summarise this report in one sentence: "], options).with_input_queue(queue)
    reply = asyncio.ensure_future(session.process_request(request))
    for piece in REPORT:  # e.g. as a user types, or as a document streams in
        queue.push(piece)
        await asyncio.sleep(0)
    queue.close()  # the turn is complete: decoding starts
    response = await reply
    print(f"prefilled before the end: {queue.prefilled_tokens} tokens")
    print(f"summary: {response.text}")
    await session.close()


if __name__ == "__main__":
    loaded = modelverse.load(os.environ.get("CLIKA_MODEL", "smollm2-135m-instruct"))
    try:
        asyncio.run(main(loaded))
    finally:
        loaded.close()
