"""Peer: onnxruntime-genai on its model builder's int4 CPU model of the same checkpoint.

One og.Generator per request. The CPU model pre-allocates its KV buffer to
``max_length`` (past and present share one buffer), so every request sets
max_length = prompt + new tokens, as a user must. End-of-sequence ids are masked
with min_length = max_length. W3 is one Generator with batch size 8: genai
takes per-row lengths from the attention mask, and its batches must be
right-padded (left padding gives wrong tokens). W4 keeps one Generator across
turns and rewinds it to the common prefix of the new prompt.
"""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata

import numpy as np
import onnxruntime_genai as og
from harness import BatchResult, ChatTemplate, TurnResult, common_prefix, worker_main

W4_MAX_LENGTH = 2048


class OrtGenai:
    def load(self, spec: dict) -> None:
        self.eos_ids = list(spec["eos_ids"])
        self.threads = spec["threads"]
        config = og.Config(spec["system"]["model_dir"])
        # Threads and both end-of-sequence ids ride an overlay, so the built folder stays as built.
        session = {"intra_op_num_threads": self.threads, "inter_op_num_threads": 1}
        self.spin = spec["spin"]
        if self.spin != "default":  # unknown session keys become ORT session config entries
            allow = "1" if self.spin == "on" else "0"
            session["session.intra_op.allow_spinning"] = allow
            session["session.inter_op.allow_spinning"] = allow
        overlay = {"model": {"eos_token_id": self.eos_ids, "decoder": {"session_options": session}}}
        config.overlay(json.dumps(overlay))
        self.model = og.Model(config)
        self.pad_id = self.eos_ids[0]
        self.template = ChatTemplate(spec["tokenizer_dir"])
        self.kept = None  # W4's Generator

    def _params(self, max_length: int, min_length: int, batch_size: int = 1):
        params = og.GeneratorParams(self.model)
        params.set_search_options(
            do_sample=False, max_length=max_length, min_length=min_length, batch_size=batch_size
        )
        return params

    def stream(self, prompt, max_new: int, ignore_eos: bool):
        total = len(prompt.ids) + max_new
        gen = og.Generator(self.model, self._params(total, total if ignore_eos else 0))
        gen.append_tokens(np.array([prompt.ids], dtype=np.int32))
        while not gen.is_done():
            gen.generate_next_token()
            yield [int(gen.get_next_tokens()[0])]

    def cold_start(self) -> None:
        self.kept = None  # W1-W3 get a fresh Generator per request anyway

    def cached_tokens(self) -> int:
        return 0

    def batch(self, prompts, max_new: int) -> BatchResult:
        longest = max(len(p.ids) for p in prompts)
        rows = [p.ids + [self.pad_id] * (longest - len(p.ids)) for p in prompts]
        start = time.perf_counter()
        total = longest + max_new
        gen = og.Generator(self.model, self._params(total, total, batch_size=len(prompts)))
        gen.append_tokens(np.array(rows, dtype=np.int32))
        first, produced = None, 0
        while not gen.is_done():
            gen.generate_next_token()
            first = first or time.perf_counter()
            produced += len(gen.get_next_tokens())
        end = time.perf_counter() - start
        # A static batch: every request ends with the batch.
        return BatchResult(
            produced,
            [end] * len(prompts),
            [first - start] * len(prompts),
            mode="one Generator, batch 8, right-padded",
        )

    def chat_turn(self, messages, ids: list[int], reply_cap: int) -> TurnResult:
        if self.kept is None:
            self.kept = og.Generator(self.model, self._params(W4_MAX_LENGTH, 0))
        gen = self.kept
        held = [int(t) for t in gen.get_sequence(0)] if gen.token_count() else []
        common = min(common_prefix(held, ids), len(ids) - 1)  # at least one new token to run
        if common < len(held):
            gen.rewind_to(common)
        gen.append_tokens(np.array([ids[common:]], dtype=np.int32))
        first, reply = None, []
        while len(reply) < reply_cap:
            gen.generate_next_token()
            first = first or time.perf_counter()
            token = int(gen.get_next_tokens()[0])
            if token in self.eos_ids:
                break
            reply.append(token)
        # The last token a turn sampled is held but its KV is computed with the next
        # turn's tokens, so the KV really reused is at most what was computed.
        reused = min(common, len(held) - 1) if held else 0
        return TurnResult(first, self.template.decode(reply), len(reply), reused)

    def versions(self) -> dict:
        return {
            "onnxruntime_genai": og.__version__,
            "onnxruntime": metadata.version("onnxruntime"),
            "spinning": "ORT default (on)" if self.spin == "default" else self.spin,
        }


if __name__ == "__main__":
    sys.exit(worker_main("onnxruntime-genai", OrtGenai()))
