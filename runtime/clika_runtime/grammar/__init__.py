"""Constrained decoding: a reply held to a JSON schema, JSON, a regex or a Lark / GBNF grammar.

* :mod:`~clika_runtime.grammar.constraint`: what a caller asks for (OpenAI's ``response_format``,
  llama.cpp's ``grammar`` / ``json_schema``, Ollama's ``format``, a pydantic model) as one
  :class:`Constraint`, compiled and checked within bounds;
* :mod:`~clika_runtime.grammar.vocabulary`: the model's tokenizer as the grammar engine sees it;
* :mod:`~clika_runtime.grammar.matcher`: one request's place in its grammar;
* :mod:`~clika_runtime.grammar.masks`: the allowed-token masks of a step's constrained rows,
  computed on worker threads while the model runs, applied to the logits.

The grammar engine is llguidance (Rust; token masks on the CPU in tens of
microseconds, JSON Schema, regex, Lark and GBNF, draft-token checks). It was
chosen over xgrammar (whose Python package pulls in torch, which the runtime
never needs) and outlines-core (regex and JSON Schema only, no CFGs, and an
index built up front whose cost grows with the schema).
"""

from clika_runtime.grammar.constraint import Constraint, GrammarError, constraint_from

__all__ = ["Constraint", "GrammarError", "constraint_from"]
