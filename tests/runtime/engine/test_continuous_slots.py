"""Eight chat sessions on one model's engine (continuous KV cache, eight slots): each session's
next turn finds its own previous turn in the cache, because a new conversation takes an empty
slot (copying the shared template prefix) rather than overwriting another one's history."""

from __future__ import annotations

from clika_runtime import modelverse
from clika_runtime.chat.session import ChatSession

GREEDY = {"temperature": 0.0, "max_new_tokens": 6}


def test_every_session_reuses_its_own_previous_turn(tiny_llama_model):
    model = modelverse.load(tiny_llama_model, threads=1, max_active=8)
    try:
        sessions = [ChatSession(model, system="You are terse.", default_budget=6) for _ in range(8)]
        for index, chat in enumerate(sessions):
            chat.send(f"session {index} says hello", **GREEDY)
        first_prompts = [chat.report.prompt_tokens for chat in sessions]
        for index, chat in enumerate(sessions):
            chat.send("and again", **GREEDY)
            # The whole first prompt comes from the cache (the reply re-renders as the template
            # writes it, which for random weights need not be the tokens sampled).
            assert chat.report.cached_tokens >= first_prompts[index], (index, chat.report)
        model.engine.check_integrity()
    finally:
        model.close()
