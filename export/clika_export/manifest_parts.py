"""The manifest parts both exporters (the native families and optimum's) write the same way.

Each takes the checkpoint's text parts: a ``Checkpoint``, or the same fields as
``readers.hf.text_parts`` returns them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clika_runtime import __version__
from clika_runtime.contract.manifest import Provenance, TokenizerSpec

TOOL = "clika_export"
TOKENIZER_FILE = "tokenizer.json"
TEMPLATE_FILE = "chat_template.jinja"


def tokenizer_spec(text: Any) -> TokenizerSpec:
    """The tokenizer file and special tokens of the checkpoint's text parts."""
    return TokenizerSpec(
        file=TOKENIZER_FILE,
        bos_token_id=text.bos_token_id,
        eos_token_ids=tuple(text.eos_token_ids),
        pad_token_id=text.pad_token_id,
        add_bos_token=text.add_bos_token,
        bos_token=text.bos_token,
        eos_token=text.eos_token,
    )


def provenance(text: Any) -> Provenance:
    """Where the export came from and what made it, stamped now."""
    return Provenance(
        source=text.source_name,
        source_format=text.source_format,
        source_sha256=text.source_sha256,
        tool=TOOL,
        tool_version=__version__,
        exported_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def write_text_files(work: Path, text: Any) -> None:
    """The tokenizer and (when the checkpoint has one) the chat template, into ``work``."""
    (work / TOKENIZER_FILE).write_text(text.tokenizer_json, encoding="utf-8")
    if text.chat_template:
        (work / TEMPLATE_FILE).write_text(text.chat_template, encoding="utf-8")
