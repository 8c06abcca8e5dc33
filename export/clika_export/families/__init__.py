"""Architecture families: each module turns a ``Checkpoint`` of its family into a step graph.

A family module exposes ``NAME`` and ``build(checkpoint, folder, context_window,
on_layer, on_tensor) -> BuiltGraph`` (the hooks as in
``clika_export.graph.decoder.build_decoder``), which the llama-shaped families
take from :class:`~clika_export.families.decoder_family.DecoderFamily`; ``family_for`` picks the module by
``Checkpoint.architecture.family`` and refuses an unknown family by name.
"""

from __future__ import annotations

from types import ModuleType

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.families import llama, qwen2

FAMILIES: dict[str, ModuleType] = {llama.NAME: llama, qwen2.NAME: qwen2}


def supported() -> tuple[str, ...]:
    """The family names this exporter builds."""
    return tuple(sorted(FAMILIES))


def family_for(checkpoint: Checkpoint) -> ModuleType:
    """The family module that builds this checkpoint's graph."""
    name = checkpoint.architecture.family
    try:
        return FAMILIES[name]
    except KeyError:
        raise CheckpointError(
            f"architecture family {name!r} is not supported (supported: {', '.join(supported())})"
        ) from None
