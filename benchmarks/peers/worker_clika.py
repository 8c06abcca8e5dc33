"""Our runtime: clika_runtime.modelverse on an exported model folder, through its public API.

The API takes text (a conversation), not token ids: it applies the chat
template and tokenizes itself. So the worker checks that the ids it computes
for the benchmark prompts are the reference ids run.py made, and records the
prompt token count the runtime reports for every request.

W1/W2: ``stream_generate(messages=..., decode=False)`` (token ids as they
arrive); W3: ``generate_batch`` (one continuous-batching engine, all prompts
submitted at once; per-request latency and first-token time from ``reports``);
W4: ``chat`` streamed, the whole history passed each turn (the chat engine keeps
its KV and prefix cache between calls; ``report.cached_tokens`` says how much).
"""

from __future__ import annotations

import inspect
import sys
import time
from importlib import metadata

from harness import BatchResult, TurnResult, worker_main

# Names a load() may take the intra-op thread count under, most specific first.
THREAD_OPTIONS = ("intra_op_num_threads", "num_threads", "threads")
EVICTION_MESSAGES = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "Ready?"},
]


class Clika:
    def load(self, spec: dict) -> None:
        from clika_runtime import modelverse

        self.eos_ids = list(spec["eos_ids"])
        options = {}
        params = inspect.signature(modelverse.load).parameters
        self.thread_option = next((n for n in THREAD_OPTIONS if n in params), None)
        if self.thread_option:
            options[self.thread_option] = spec["threads"]
        self.spin = spec["spin"]
        if self.spin != "default" and "allow_spinning" in params:
            options["allow_spinning"] = self.spin == "on"
        self.options = options
        self.model = modelverse.load(spec["system"]["model_dir"], **options)
        self.prompt_ids_match = self._same_ids(spec["w1"]["messages"], spec["w1"]["ids"])

    def _same_ids(self, messages, reference: list[int]) -> bool | None:
        """Whether the runtime turns the conversation into the reference ids (None: cannot tell)."""
        encode = getattr(self.model.tokenizer, "encode", None)
        if encode is None:
            return None
        ids = encode(self.model.render(messages))
        ids = getattr(ids, "ids", ids)
        return [int(t) for t in ids] == list(reference)

    def _greedy(self, max_new: int, ignore_eos: bool) -> dict:
        return {"max_new_tokens": max_new, "temperature": 0.0, "ignore_eos": ignore_eos}

    def stream(self, prompt, max_new: int, ignore_eos: bool):
        pieces = self.model.stream_generate(
            messages=prompt.messages, decode=False, **self._greedy(max_new, ignore_eos)
        )
        for ids in pieces:
            yield [int(t) for t in ids]
        report = self.model.report
        if report is not None and report.prompt_tokens != len(prompt.ids):
            raise RuntimeError(
                f"the runtime read {report.prompt_tokens} prompt tokens, the reference ids are {len(prompt.ids)}"
            )

    def cold_start(self) -> None:
        """Leave the engine's prefix cache nothing the next prompt shares.

        The runtime keeps each finished request's KV for the next prompt with
        the same prefix (every benchmark prompt starts with the same default
        system turn). The API has no switch for one request, so an untimed
        one-token request with a system turn of its own takes the cache's place:
        at most the 3 tokens that open any system turn stay shared.
        """
        for _ in self.model.stream_generate(
            messages=EVICTION_MESSAGES, decode=False, **self._greedy(1, True)
        ):
            pass

    def cached_tokens(self) -> int:
        return self.model.report.cached_tokens

    def batch(self, prompts, max_new: int) -> BatchResult:
        texts = [p.messages[-1]["content"] for p in prompts]
        self.model.generate_batch(texts, **self._greedy(max_new, True))
        outcomes = self.model.reports
        return BatchResult(
            sum(o.completion_tokens for o in outcomes),
            [o.report.total_s for o in outcomes],  # submission to last token
            [o.time_to_first_token_s for o in outcomes if o.time_to_first_token_s is not None],
            mode="generate_batch (continuous batching, all submitted at once)",
            extra={"prompt_tokens": [o.prompt_tokens for o in outcomes]},
        )

    def chat_turn(self, messages, ids: list[int], reply_cap: int) -> TurnResult:
        first, pieces = None, []
        for piece in self.model.chat(messages, stream=True, **self._greedy(reply_cap, False)):
            first = first or time.perf_counter()
            pieces.append(piece if isinstance(piece, str) else "")
        outcome = self.model.report
        extra = {
            "runtime_prompt_tokens": outcome.prompt_tokens,
            "runtime_ttft_ms": None
            if outcome.time_to_first_token_s is None
            else outcome.time_to_first_token_s * 1e3,
        }
        return TurnResult(first, "".join(pieces), outcome.completion_tokens, outcome.cached_tokens, extra)

    def versions(self) -> dict:
        return {
            "clika_runtime": metadata.version("clika-runtime"),
            "onnxruntime": metadata.version("onnxruntime"),
            "load_options": self.options,
            "thread_option": self.thread_option or "none in load(): the runtime's default",
            "prompt_ids_match_reference": self.prompt_ids_match,
            "kv_cache_mode": getattr(self.model, "kv_cache_mode", None),
        }


if __name__ == "__main__":
    sys.exit(worker_main("clika", Clika()))
