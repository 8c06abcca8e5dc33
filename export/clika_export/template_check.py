"""The checkpoint's chat template, checked before anything is built.

A template is code from the checkpoint: one that loops, recurses or allocates
without bound would otherwise surface only at the int8 KV calibration, after
the graph is built. It is compiled and made to render the calibration
conversation here, within the runtime's render limits, and refused by name.
"""

from __future__ import annotations

from clika_export.calibration_text import CALIBRATION_MESSAGES
from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_runtime.chat.templates.chat_template import ChatTemplate, TemplateError


def check_chat_template(checkpoint: Checkpoint) -> None:
    """CheckpointError naming the problem when the chat template does not render within the limits."""
    if not checkpoint.chat_template:
        return
    specials = {
        key: value
        for key, value in (("bos_token", checkpoint.bos_token), ("eos_token", checkpoint.eos_token))
        if value
    }
    try:
        ChatTemplate(checkpoint.chat_template, special_tokens=specials).render(list(CALIBRATION_MESSAGES))
    except TemplateError as exc:
        raise CheckpointError(f"{checkpoint.source_name}: the {exc}") from None
