"""Conversations' KV in a folder the replicas share, so a conversation survives its replica.

After a replica answers a chat request it saves the KV of the conversation as the request
sent it (the messages rendered without the assistant's turn opened) to
``<folder>/<routing key digest>.kv``; a replica that gets a conversation it did not save
itself installs that file's KV before answering, so only what came after it (the last reply
and the new message) is read. The file format and its checks are the chat layer's
(``clika_runtime.chat.kv_resume``): a missing, foreign or damaged file is logged and the
conversation is read again, never an error of the request. Writes are atomic, so two
replicas saving one conversation leave one whole file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clika_runtime.chat.kv_resume import ConversationPrompt, conversation_prompt, restore_kv, save_kv
from clika_runtime.cluster.forwarded import ForwardedRequest
from clika_runtime.engine.config import GenerationConfig

CHAT_PATHS = ("/v1/chat/completions", "/api/chat")
log = logging.getLogger("clika_runtime.cluster")


@dataclass(frozen=True)
class Conversation:
    prompt: ConversationPrompt
    path: Path


class SharedKVStore:
    def __init__(self, folder: str | Path, model: Any) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.model = model
        self._saved_here: set[Path] = set()  # this replica's cache already holds these
        self.restored_tokens = 0

    async def before(self, request: ForwardedRequest) -> Conversation | None:
        """The conversation ``request`` continues, its saved KV installed when another replica saved it."""
        conversation = self._conversation(request)
        if conversation is None:
            return None
        if conversation.path not in self._saved_here and conversation.path.is_file():
            tokens = await asyncio.to_thread(
                restore_kv, self.model, self.model.engine, conversation.prompt, conversation.path
            )
            self.restored_tokens += tokens
        return conversation

    async def after(self, conversation: Conversation) -> None:
        try:
            await asyncio.to_thread(
                save_kv, self.model, self.model.engine, conversation.prompt, conversation.path
            )
            self._saved_here.add(conversation.path)
        except Exception as exc:  # a full disk must not fail the reply already sent
            log.warning("the conversation's KV was not saved to %s: %s", conversation.path, exc)

    def _conversation(self, request: ForwardedRequest) -> Conversation | None:
        if request.route_key is None or request.scope.get("path") not in CHAT_PATHS:
            return None
        try:
            messages = json.loads(request.body).get("messages")
            prompt = conversation_prompt(self.model, messages, None, GenerationConfig())
        except Exception:  # the app answers a malformed request with its own 400
            return None
        digest = hashlib.sha256(request.route_key.encode()).hexdigest()[:32]
        return Conversation(prompt, self.folder / f"{digest}.kv")
