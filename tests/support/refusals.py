"""A server's refusal of a bad chat request, checked the one way every front-end test wants it."""

from __future__ import annotations


def refused_400(http, model: str, messages: list[dict], expect: str) -> dict:
    """POST ``messages`` to ``/v1/chat/completions``: a 400 whose message holds ``expect``; its error."""
    body = {"model": model, "messages": messages, "max_tokens": 2}
    response = http.post("/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert expect in error["message"], error
    return error
