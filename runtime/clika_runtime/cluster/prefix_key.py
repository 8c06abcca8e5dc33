"""Which replica should see a request: its session id, else its conversation's first KV blocks' key.

The paged cache knows a block by its chain hash (``clika_runtime.engine.kv.prefix_cache``:
the hash of the prefix before it and its tokens). Every turn of one conversation starts
with the same tokens, the chat template's rendering of the messages up to the first user
turn, so the chain hash over those tokens' blocks (the last one partial, as the cache keeps
a turn's unfilled last block) names the conversation for as long as it lasts, and two
conversations that differ only after a shared system prompt still get different keys.
Sending equal keys to one replica is what keeps its cached prefix warm.

The key needs the tokenizer and the chat template, never the model's graphs: the front
deployment reads them from the model folder without loading the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from clika_runtime.chat.templates.chat_template import ChatTemplate
from clika_runtime.contract.manifest import Manifest
from clika_runtime.engine.kv.prefix_cache import ROOT_HASH, chain_hash
from clika_runtime.text.tokenizer import Tokenizer

SESSION_HEADER = b"x-session-id"
DEFAULT_BLOCK_SIZE = 16  # the paged graph's block when a folder has none
MAX_TOKENS = 8192  # a first turn longer than this is named by its beginning (bounded work per request)
CHAT_PATHS = ("/v1/chat/completions", "/api/chat", "/v1/responses")
PROMPT_PATHS = ("/v1/completions", "/api/generate")


class PrefixKeyer:
    """The routing key of a request to the model in ``folder`` (None: the request has no conversation)."""

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        manifest = Manifest.read(folder)
        spec = manifest.tokenizer
        self.tokenizer = Tokenizer.with_specials(HFTokenizer.from_file(str(folder / spec.file)), spec)
        self.template = None
        if manifest.chat_template_file:
            specials = {k: v for k, v in (("bos_token", spec.bos_token), ("eos_token", spec.eos_token)) if v}
            text = (folder / manifest.chat_template_file).read_text(encoding="utf-8")
            self.template = ChatTemplate(text, special_tokens=specials)
        paged = manifest.graphs.get("paged")
        self.block_size = (paged.kv.block_size if paged is not None else None) or DEFAULT_BLOCK_SIZE

    def route_key(self, path: str, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> str | None:
        """``session:<id>`` from ``X-Session-Id`` or the body's ``user``; else ``prefix:<hash>``."""
        for name, value in headers:
            if name.lower() == SESSION_HEADER and value.strip():
                return "session:" + value.decode("latin-1").strip()
        request = _json_object(body)
        if request is None:
            return None
        user = request.get("user")
        if isinstance(user, str) and user.strip():
            return "session:" + user.strip()
        tokens = self._first_turn_tokens(path, request)
        return None if not tokens else f"prefix:{self.key_of(tokens)}"

    def key_of(self, tokens: Sequence[int]) -> int:
        """The chain hash over ``tokens``' blocks of ``block_size`` (the last one partial when they
        do not fill it), as the paged cache chains them; at most ``MAX_TOKENS`` tokens."""
        tokens = tokens[:MAX_TOKENS]
        parent = ROOT_HASH
        for start in range(0, len(tokens), self.block_size):
            parent = chain_hash(parent, tuple(tokens[start : start + self.block_size]))
        return parent

    def _first_turn_tokens(self, path: str, request: Mapping[str, Any]) -> list[int]:
        if path in PROMPT_PATHS:
            prompt = request.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                return list(prompt)
            return self.tokenizer.encode(prompt) if isinstance(prompt, str) and prompt else []
        if path not in CHAT_PATHS:
            return []
        messages = request.get("messages", request.get("input"))
        if not isinstance(messages, list):
            return []
        first = _up_to_first_user(messages)
        if not first:
            return []
        try:
            text = (
                self.template.render(first, add_generation_prompt=False)
                if self.template is not None
                else json.dumps(first, sort_keys=True)
            )
        except Exception:  # a malformed conversation: the replica answers it with its 400
            text = json.dumps(first, sort_keys=True, default=str)
        return self.tokenizer.encode(text)


def _up_to_first_user(messages: list[Any]) -> list[dict[str, Any]]:
    for end, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return [m for m in messages[: end + 1] if isinstance(m, dict)]
    return []


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None
