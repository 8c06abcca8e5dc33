"""The runtime's tokenizer: a ``tokenizers`` tokenizer plus the model's special ids.

Beginning-of-sequence handling is the manifest's, not the tokenizer.json
post-processor's: ``encode`` never lets the post-processor add tokens and
prepends BOS itself when the model asks for it and the text does not already
start with it (a chat template usually writes it). That keeps raw prompts and
rendered conversations consistent whatever the post-processor says.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _HFTokenizer

from clika_runtime.text.detokenizer import StreamingDetokenizer


class Tokenizer:
    """Encode text to ids and back for one model."""

    def __init__(
        self,
        inner: _HFTokenizer,
        *,
        bos_token_id: int | None = None,
        eos_token_ids: Iterable[int] = (),
        pad_token_id: int | None = None,
        add_bos_token: bool = False,
        bos_token: str | None = None,
        eos_token: str | None = None,
    ) -> None:
        self.inner = inner
        self.bos_token_id = bos_token_id
        self.eos_token_ids = tuple(eos_token_ids)
        self.pad_token_id = pad_token_id
        self.add_bos_token = add_bos_token
        self.bos_token = bos_token if bos_token is not None else self._token_text(bos_token_id)
        first_eos = self.eos_token_ids[0] if self.eos_token_ids else None
        self.eos_token = eos_token if eos_token is not None else self._token_text(first_eos)
        self.special_token_ids = frozenset(
            token_id for token_id, added in inner.get_added_tokens_decoder().items() if added.special
        )

    @classmethod
    def with_specials(cls, inner: _HFTokenizer, spec: Any) -> Tokenizer:
        """``inner`` with the special tokens a manifest's tokenizer entry (``spec``) names."""
        names = ("bos_token_id", "eos_token_ids", "pad_token_id", "add_bos_token", "bos_token", "eos_token")
        return cls(inner, **{name: getattr(spec, name) for name in names})

    @classmethod
    def from_file(cls, path: str | Path, **special: object) -> Tokenizer:
        """Load a ``tokenizer.json``; keyword arguments are the special ids (see ``__init__``)."""
        return cls(_HFTokenizer.from_file(str(path)), **special)  # type: ignore[arg-type]

    def _token_text(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.inner.id_to_token(token_id)

    @property
    def vocab_size(self) -> int:
        """The number of ids the tokenizer knows (added tokens included)."""
        return self.inner.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; with ``add_special_tokens`` BOS leads when the model wants it."""
        # encode_batch releases the GIL while it runs (encode holds it): a long prompt tokenized on
        # a worker thread then leaves the other threads (an event loop, the engine) running.
        ids = self.inner.encode_batch([text], add_special_tokens=False)[0].ids
        if add_special_tokens and self.add_bos_token and self.bos_token_id is not None:
            if not ids or ids[0] != self.bos_token_id:
                ids.insert(0, self.bos_token_id)
        return ids

    def encode_as_checkpoint(self, text: str) -> list[int]:
        """Token ids as the checkpoint's own tokenizer makes them: its post-processor's special tokens
        too (an embedding model's closing EOS, which last-token pooling reads), BOS as ``encode`` adds it."""
        ids = self.inner.encode_batch([text], add_special_tokens=True)[0].ids
        if self.add_bos_token and self.bos_token_id is not None and (not ids or ids[0] != self.bos_token_id):
            ids.insert(0, self.bos_token_id)
        return ids

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        return [self.encode(t, add_special_tokens=add_special_tokens) for t in texts]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def streaming_decoder(
        self, *, skip_special_tokens: bool = True, prompt_ids: Iterable[int] = ()
    ) -> StreamingDetokenizer:
        """The incremental decoder the text streams use (``prompt_ids`` gives it context)."""
        return StreamingDetokenizer(
            self.inner, skip_special_tokens=skip_special_tokens, prompt_ids=prompt_ids
        )

    def token_to_id(self, token: str) -> int | None:
        return self.inner.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.inner.id_to_token(token_id)
