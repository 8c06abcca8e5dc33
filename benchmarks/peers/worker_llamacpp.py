"""Peer: llama-cpp-python on the GGUF itself (llama.cpp's own kernels, weights unchanged).

One Llama context, one sequence at a time (the Python API has no concurrent
batching), so W3 runs its requests one after another and their latencies count
the queueing. Llama.generate() keeps the KV of the previous call and reuses the
longest common token prefix; every request except W4's turns starts from a
reset context so nothing is reused by accident. End-of-sequence ids are masked
by a logits processor, like llama.cpp's ignore_eos.
"""

from __future__ import annotations

import os
import sys
import time

import llama_cpp
import numpy as np
from harness import BatchResult, ChatTemplate, TurnResult, common_prefix, worker_main


class LlamaCppPython:
    def load(self, spec: dict) -> None:
        opts = spec["system"]
        self.eos_ids = list(spec["eos_ids"])
        self.flash_attn = bool(opts.get("flash_attn", False))
        self.llm = llama_cpp.Llama(
            model_path=opts["gguf"],
            n_ctx=opts.get("n_ctx", 4096),
            n_batch=512,
            n_threads=spec["threads"],
            n_threads_batch=spec["threads"],
            flash_attn=self.flash_attn,
            verbose=False,
        )
        self.template = ChatTemplate(spec["tokenizer_dir"])
        self._reused = 0

    def _mask_eos(self, input_ids, logits):
        logits[self.eos_ids] = -np.inf
        return logits

    def cold_start(self) -> None:
        self.llm.reset()

    def _generate(self, ids: list[int], max_new: int, ignore_eos: bool):
        llm = self.llm
        # generate() evaluates at least one prompt token, so it reuses at most len(ids) - 1
        self._reused = min(common_prefix(llm._input_ids[: llm.n_tokens].tolist(), ids), len(ids) - 1)
        processors = llama_cpp.LogitsProcessorList([self._mask_eos]) if ignore_eos else None
        produced = 0
        for token in llm.generate(
            ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, logits_processor=processors
        ):
            yield token
            produced += 1
            if produced >= max_new:
                return

    def stream(self, prompt, max_new: int, ignore_eos: bool):
        for token in self._generate(prompt.ids, max_new, ignore_eos):
            yield [token]

    def cached_tokens(self) -> int:
        return self._reused

    def batch(self, prompts, max_new: int) -> BatchResult:
        start = time.perf_counter()
        latencies, firsts, total = [], [], 0
        for prompt in prompts:
            self.llm.reset()  # each request from scratch, like a fresh request would be
            first = None
            for _ in self._generate(prompt.ids, max_new, True):
                first = first or time.perf_counter()
                total += 1
            latencies.append(time.perf_counter() - start)
            firsts.append(first - start)
        return BatchResult(total, latencies, firsts, mode="sequential (no batching in the Python API)")

    def chat_turn(self, messages, ids: list[int], reply_cap: int) -> TurnResult:
        first, reply = None, []
        for token in self._generate(ids, reply_cap, False):
            first = first or time.perf_counter()
            if token in self.eos_ids:
                break
            reply.append(token)
        return TurnResult(first, self.template.decode(reply), len(reply), self._reused)

    def versions(self) -> dict:
        return {
            "llama_cpp_python": llama_cpp.__version__,
            "flash_attn": self.flash_attn,
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "unset (OpenMP default)"),
            "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        }


if __name__ == "__main__":
    sys.exit(worker_main("llama-cpp-python", LlamaCppPython()))
