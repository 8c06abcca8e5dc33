"""The model's vocabulary as the grammar engine sees it: built once per tokenizer (about a
second for a 150k vocabulary) and kept with it."""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any

from clika_runtime.grammar.constraint import _engine
from clika_runtime.text.tokenizer import Tokenizer

_BUILT: weakref.WeakKeyDictionary[Tokenizer, dict[int, Any]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def grammar_vocabulary(tokenizer: Tokenizer, vocab_size: int) -> Any:
    """The llguidance tokenizer for ``tokenizer`` over ``vocab_size`` logits (the model's head may
    be wider than the tokenizer: ids past it are never allowed)."""
    with _LOCK:
        built = _BUILT.setdefault(tokenizer, {})
        if vocab_size not in built:
            built[vocab_size] = _engine().LLTokenizer(
                tokenizer.inner.to_str(),
                n_vocab=vocab_size,
                eos_token=list(tokenizer.eos_token_ids) or None,
            )
        return built[vocab_size]


def lark_literal(vocabulary: Any, text: str) -> str:
    """``text`` as a Lark term of a grammar over ``vocabulary``: a reference to the one special token
    it is (``<[id]>``) or a quoted string.

    A marker such as Qwen's ``<tool_call>`` is a single added token the grammar engine keeps apart
    from text: a quoted ``"<tool_call>"`` would match the characters one by one but refuse the token
    the model actually writes, so it must be named by id.
    """
    tokens = vocabulary.tokenize_str(text)
    if len(tokens) == 1 and vocabulary.is_special_token(tokens[0]):
        return f"<[{tokens[0]}]>"
    return json.dumps(text)
