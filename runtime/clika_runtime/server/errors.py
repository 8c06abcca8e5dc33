"""Errors in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}`` with an HTTP status."""

from __future__ import annotations

import json
from typing import Any

# OpenAI's error types by status (clients branch on the status; the type is for people reading logs).
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_overloaded",
}


class ApiError(Exception):
    """A request the server refuses: ``status`` and an OpenAI error body naming the problem."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients read (``openai.APIStatusError.body``)."""
        return error_body(self.status, self.message, param=self.param, code=self.code)


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict:
    """``{"error": {...}}`` for ``status``."""
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def ollama_path(path: str) -> bool:
    """True for the Ollama front end's routes, whose errors are ``{"error": "message"}``."""
    return path == "/api" or path.startswith("/api/")


def error_payload(
    path: str, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The error body in the shape of the front end serving ``path``."""
    if ollama_path(path):
        return {"error": message}
    return error_body(status, message, param=param, code=code)


def error_json(
    path: str, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> bytes:
    return json.dumps(error_payload(path, status, message, param=param, code=code)).encode()
