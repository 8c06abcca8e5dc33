"""Chat requests to a served model, sent and checked the one way every front-end test wants them."""

from __future__ import annotations


def refused_400(http, model: str, messages: list[dict], expect: str) -> dict:
    """POST ``messages`` to ``/v1/chat/completions``: a 400 whose message holds ``expect``; its error."""
    body = {"model": model, "messages": messages, "max_tokens": 2}
    response = http.post("/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert expect in error["message"], error
    return error


def openai_greedy_reply(model, model_id: str, messages: list[dict], max_tokens: int):
    """``model`` served as ``model_id``; the real openai client's greedy reply to ``messages``."""
    import openai

    from clika_runtime.server import start_server

    with start_server(model, model_id=model_id) as running:
        client = openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=120)
        return client.chat.completions.create(
            model=model_id, messages=messages, max_tokens=max_tokens, temperature=0.0,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
