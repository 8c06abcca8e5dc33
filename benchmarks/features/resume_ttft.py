"""Time to first token of a resumed conversation: its KV restored from disk, or read again (cold).

A long conversation (about ``--tokens`` tokens: a system prompt and turns of
fixed text) is saved once with its KV (``ChatSession.save_kv``). Then, in
alternating rounds on a fresh engine each time (nothing cached, as in a new
process), the same next turn runs either after ``restore_kv`` (read, checked
and installed; its time is reported apart and in the total) or straight away,
reading the whole transcript. The figures are medians; on a shared machine
only the ratio within one run means much.

    python benchmarks/features/resume_ttft.py smollm2-135m-instruct qwen2.5-coder-0.5b-instruct --tokens 1800
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from clika_runtime import modelverse
from clika_runtime.store import resolve

TOPICS = [
    "rivers",
    "mountains",
    "old maps",
    "bread",
    "clocks",
    "bridges",
    "tea",
    "libraries",
    "trains",
    "bees",
]
NEXT = "Summarize what we talked about in one sentence."


def conversation(model: modelverse.GenerativeModel, tokens: int) -> list[dict[str, str]]:
    """A system prompt and user / assistant turns of fixed text, about ``tokens`` tokens rendered."""
    messages = [{"role": "system", "content": "You are a patient assistant who answers in detail."}]
    turn = 0
    while len(model.tokenizer.encode(model.render(messages, add_generation_prompt=False))) < tokens:
        topic = TOPICS[turn % len(TOPICS)]
        messages.append({"role": "user", "content": f"Tell me something about {topic} (part {turn + 1})."})
        facts = " ".join(
            f"Fact {i + 1} about {topic}: people have studied {topic} for centuries, and each "
            f"generation finds new details worth writing down."
            for i in range(4)
        )
        messages.append({"role": "assistant", "content": facts})
        turn += 1
    return messages


def next_turn(model: modelverse.GenerativeModel, messages, kv: Path | None) -> tuple[float, float, int]:
    """(restore seconds, time to first token, cached tokens) of the next turn on a fresh engine."""
    model.close()  # a new engine on the next request: an empty cache, as in a new process
    chat = model.chat_session(messages=messages)
    start = time.perf_counter()
    if kv is not None:
        chat.restore_kv(kv)
    restored = time.perf_counter() - start
    chat.send(NEXT, max_new_tokens=8, temperature=0.0)
    report = chat.report.report
    chat.close()
    return restored, report.time_to_first_token_s or 0.0, report.cached_tokens


def measure(name: str, args: argparse.Namespace, folder_of: dict[str, Path]) -> None:
    model = modelverse.load(
        folder_of[name], threads=args.threads, kv_cache_mode="paged", kv_cache_dtype=args.kv_dtype
    )
    messages = conversation(model, args.tokens)
    with tempfile.TemporaryDirectory() as scratch:
        kv = Path(scratch) / "conversation.kv"
        chat = model.chat_session(messages=messages)
        start = time.perf_counter()
        saved = chat.save_kv(kv)
        save_s = time.perf_counter() - start
        chat.close()
        warm: list[tuple[float, float, int]] = []
        cold: list[tuple[float, float, int]] = []
        for _ in range(args.rounds):
            warm.append(next_turn(model, messages, kv))
            cold.append(next_turn(model, messages, None))
        size = kv.stat().st_size
    model.close()
    restore = statistics.median(r for r, _, _ in warm)
    warm_ttft = statistics.median(t for _, t, _ in warm)
    cold_ttft = statistics.median(t for _, t, _ in cold)
    total = statistics.median(r + t for r, t, _ in warm)
    print(
        f"| {name} | {args.kv_dtype} | {saved} | {size / 2**20:.1f} | {save_s:.2f} | {restore:.3f} | "
        f"{warm_ttft:.3f} | {total:.3f} | {cold_ttft:.3f} | {cold_ttft / total:.1f}x | "
        f"{warm[0][2]} / {cold[0][2]} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"])
    parser.add_argument("--tokens", type=int, default=1800, help="the conversation's length in tokens")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--kv-dtype", choices=["float32", "int8"], default="float32")
    args = parser.parse_args()
    folder_of = {
        name: resolve(name, None, pull=True, say=print, progress=True).folder for name in args.models
    }
    print(
        "| model | KV dtype | tokens saved | file MiB | save s | restore s | resumed TTFT s | "
        "restore + TTFT s | cold TTFT s | cold / resumed | cached tokens resumed / cold |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in args.models:
        measure(name, args, folder_of)


if __name__ == "__main__":
    main()
