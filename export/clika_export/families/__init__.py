"""Architecture families: each module turns a ``Checkpoint`` of its family into a step graph.

A family module exposes ``NAME``, ``decoder_spec(checkpoint, context_window) ->
DecoderSpec`` (what the export's float reference follows too) and
``build(checkpoint, folder, context_window, on_layer, on_tensor) -> BuiltGraph``
(the hooks as in ``clika_export.graph.decoder.build_decoder``), which every
family takes from :class:`~clika_export.families.decoder_family.DecoderFamily`;
``family_for`` picks the module by ``Checkpoint.architecture.family`` and
refuses an unknown family by name.
"""

from __future__ import annotations

from types import ModuleType

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.families import gemma2, gemma3, granite, llama, mistral, olmo2, phi3, qwen2, qwen3, smollm3

FAMILIES: dict[str, ModuleType] = {
    module.NAME: module
    for module in (gemma2, gemma3, granite, llama, mistral, olmo2, phi3, qwen2, qwen3, smollm3)
}


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
