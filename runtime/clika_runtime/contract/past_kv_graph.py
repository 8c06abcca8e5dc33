"""The contract of past-KV graphs (optimum's exporter builds them): input and output names.

One call runs one sequence's ``n`` new tokens: ``input_ids`` and, when the graph
takes it, ``position_ids`` (int64 ``[1, n]``), ``attention_mask`` (int64 ``[1,
past + n]``, all ones), and per layer the past ``past_key_values.{layer}.key`` /
``.value`` (float32 ``[1, kv_heads, past, head_dim]``); it gives ``logits``
(``[1, n, vocab]``) and ``present.{layer}.key`` / ``.value``, the past with the
new tokens appended. ``clika_runtime.engine.past_kv_runner`` drives it;
``clika_export.fallback`` checks an exported graph against it.
"""

from __future__ import annotations

INPUT_IDS, ATTENTION_MASK, POSITION_IDS = "input_ids", "attention_mask", "position_ids"
PAST_KEY, PAST_VALUE = "past_key_values.{layer}.key", "past_key_values.{layer}.value"
PRESENT_KEY, PRESENT_VALUE = "present.{layer}.key", "present.{layer}.value"
LOGITS = "logits"
