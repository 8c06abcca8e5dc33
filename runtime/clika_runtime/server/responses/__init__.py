"""The Responses API, stateless: /v1/responses (bodies in, response objects and events out)."""
