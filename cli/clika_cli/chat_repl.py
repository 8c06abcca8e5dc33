"""The read-reply loop of ``clika chat`` over one ChatSession, and what the slash commands change.

Ctrl-C during a reply stops it (what was said stays in the conversation);
Ctrl-C at the prompt twice in a row, ``/exit`` or EOF (Ctrl-D) leaves. A
conversation saved once (``/save``, ``/load``, ``--resume``) is bound to its id
and saved again after every reply, so leaving never loses a turn of it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from clika_cli.arguments import utf8_problem
from clika_cli.chat_audio import restored_audio, storable_audio
from clika_cli.chat_images import restored
from clika_cli.chat_input import read_message
from clika_cli.common import dim, draft_tally, say
from clika_cli.conversations import ConversationError, Conversations
from clika_cli.interrupts import ReplyInterrupt, run_interruptibly

if TYPE_CHECKING:
    from clika_runtime.chat.session import ChatSession
    from clika_runtime.modelverse import GenerativeModel


class ChatRepl:
    """One chat: the session, how replies are decoded, and the id it is saved under (if any)."""

    def __init__(
        self,
        model: GenerativeModel,
        *,
        system: str | None,
        budget: int,
        overrides: dict,
        name: str = "",
        conversations: Conversations | None = None,
    ) -> None:
        self.model = model
        self.name = name or model.local_dir.name
        self.budget = budget
        self.overrides: dict[str, Any] = overrides
        self.conversations = conversations or Conversations()
        self.conversation_id: str | None = None
        self.restored_tokens = 0  # tokens of saved KV the last /load or --resume installed
        self.session: ChatSession = self._new_session(system=system)
        self.images: list[Any] = []  # attached by /image: they ride the next message
        self.audio: list[Any] = []  # attached by /audio: they ride the next message

    @property
    def system(self) -> str | None:
        history = self.session.messages
        return history[0]["content"] if history and history[0]["role"] == "system" else None

    def _new_session(self, *, system: str | None = None, messages: list | None = None) -> ChatSession:
        return self.model.chat_session(system=system, messages=messages or (), default_budget=self.budget)

    def close(self) -> None:
        if self.conversation_id is not None:
            self.save_kv(self.conversation_id)  # the next --resume skips reading the chat again
        self.session.close()
        self.conversations.close()

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        from clika_cli.chat_slash import run_command

        interrupted = False  # the last prompt ended in Ctrl-C
        while True:
            try:
                text = read_message()
            except EOFError:
                click.echo()
                return
            except KeyboardInterrupt:
                click.echo()
                if interrupted:
                    return
                interrupted = True
                say(dim("(Ctrl-C again, /exit or Ctrl-D to leave)"))
                continue
            interrupted = False
            if not text:
                continue
            problem = utf8_problem(text)
            if problem:
                say(f"Error: the line was not sent: {problem}")
                continue
            if text.startswith("/"):
                try:
                    if not run_command(self, text):
                        return
                except KeyboardInterrupt:  # a slow command (/load, /save) given up on: the chat goes on
                    click.echo()
                    say(dim("[interrupted]"))
                continue
            self.reply(text)

    def reply(self, text: str) -> None:
        # Ctrl-C from here to the statistics stops the reply (see clika_cli.interrupts).
        run_interruptibly(lambda interrupt: self._reply(text, interrupt), self.session.cancel)

    def _reply(self, text: str, interrupt: ReplyInterrupt) -> None:
        try:
            pieces = self.session.send(
                text,
                stream=True,
                images=self.images,
                audio=self.audio,
                **self.overrides,
                max_new_tokens=self.budget,
            )
        except ValueError as exc:  # the conversation no longer fits, a setting the model refuses
            say(f"Error: {exc}")
            return
        self.images, self.audio = [], []
        self._show(pieces, interrupt)
        self.stats()
        self.autosave()

    def _show(self, pieces: Iterator[Any], interrupt: ReplyInterrupt) -> None:
        """Print the reply as it comes, until it ends or Ctrl-C stops it (the partial reply stays)."""
        for piece in pieces:
            if interrupt.happened:
                break
            if isinstance(piece, str):
                sys.stdout.write(piece)
                sys.stdout.flush()
        click.echo()
        if interrupt.happened:
            # The turn is cancelled (ChatSession.cancel, also when the Ctrl-C came during its render):
            # it ends at the next step and joins the history.
            for _ in pieces:
                pass
            say(dim("[stopped]"))

    def stats(self) -> None:
        report = self.session.report
        if report is None:
            return
        parts = [f"{report.completion_tokens} tokens"]
        if report.decode_tokens_per_s:
            parts.append(f"{report.decode_tokens_per_s:.1f} tokens/s")
        if report.time_to_first_token_s is not None:
            parts.append(f"first token {report.time_to_first_token_s:.2f} s")
        tally = draft_tally(report)
        if tally:
            parts.append(tally)
        say(dim(", ".join(parts)))

    # -- what the slash commands change ------------------------------------------------------------

    def clear(self) -> str | None:
        """Start over (the system prompt stays); returns the id the old conversation stays saved under.

        The new conversation is bound to no id, so it never overwrites the saved one.
        """
        self.session.reset()
        kept, self.conversation_id = self.conversation_id, None
        return kept

    def set_system(self, text: str | None) -> None:
        """Replace the system prompt, keeping the conversation."""
        turns = [m for m in self.session.messages if m["role"] != "system"]
        messages = ([{"role": "system", "content": text}] if text else []) + turns
        self._replace_session(messages)

    def save(self, conversation_id: str | None) -> str:
        """Save under ``conversation_id`` (None: the bound id, else a new one) and bind to it."""
        chosen = conversation_id or self.conversation_id or self.conversations.unused_id()
        self.conversations.save(chosen, storable_audio(self.session.messages))
        self.conversation_id = chosen
        self.save_kv(chosen)
        return chosen

    def save_kv(self, conversation_id: str) -> int:
        """Keep the conversation's KV beside its transcript (on /save and when the chat ends; the
        transcript alone is saved after every reply, and KV of its beginning still serves)."""
        try:
            return self.session.save_kv(self.conversations.kv_file(conversation_id))
        except (ConversationError, OSError, ValueError, RuntimeError) as exc:
            say(f"Error: the conversation's KV was not saved: {exc}")
            return 0

    def restore_kv(self, conversation_id: str) -> int:
        """Install the KV saved with the conversation (0 when there is none or it does not fit)."""
        try:
            return self.session.restore_kv(self.conversations.kv_file(conversation_id))
        except (ConversationError, OSError, ValueError, RuntimeError) as exc:
            say(f"Error: the conversation's saved KV was not read: {exc}")
            return 0

    def load(self, conversation_id: str) -> int:
        """Continue a saved conversation (bound to its id); returns how many turns it holds."""
        messages = self.conversations.load(conversation_id)
        try:
            messages = restored_audio(restored(messages))
        except ValueError as exc:
            raise ConversationError(
                f"{conversation_id!r} holds an image or clip that cannot be read: {exc}"
            ) from None
        return self.adopt(conversation_id, messages)

    def adopt(self, conversation_id: str, messages: list[dict[str, Any]]) -> int:
        """Continue ``messages``, saved under ``conversation_id``; returns how many turns they hold."""
        try:
            self._replace_session(messages)
        except ValueError as exc:
            raise ConversationError(
                f"{conversation_id!r} is no transcript this chat can continue: {exc}"
            ) from None
        self.conversation_id = conversation_id
        self.restored_tokens = self.restore_kv(conversation_id)
        return sum(1 for m in messages if m.get("role") != "system")

    def autosave(self) -> None:
        if self.conversation_id is None:
            return
        try:
            self.conversations.save(self.conversation_id, storable_audio(self.session.messages))
        except ConversationError as exc:
            say(f"Error: {exc}")

    def _replace_session(self, messages: list[dict[str, Any]]) -> None:
        """A new session holding ``messages``; on a ValueError the old conversation goes on."""
        kept = self.session.messages
        self.session.close()  # first, so that two sessions' KV caches never coexist
        try:
            self.session = self._new_session(messages=messages)
        except ValueError:
            self.session = self._new_session(messages=kept)
            raise
