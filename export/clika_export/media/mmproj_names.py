"""How an mmproj GGUF names a vision tower's tensors, per projector type (one shared mapping).

llama.cpp's converter renames a Hugging Face tower by the same scheme for
every projector: a few whole-model modules get fixed names, and each encoder
layer ``<layers>.<i>.<part>`` becomes ``v.blk.<i>.<short part>``, the leaf
(``weight`` / ``bias``) kept. A projector module states its tables; this
reads a name through them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from clika_export.checkpoint import CheckpointError


@dataclass(frozen=True)
class MmprojNames:
    """``modules``: whole-model module -> mmproj prefix; ``layer``: a layer module's pattern
    (group 1 its index, group 2 its part); ``parts``: layer part -> mmproj short name."""

    modules: Mapping[str, str]
    layer: re.Pattern[str]
    parts: Mapping[str, str]

    def gguf_name(self, hf_name: str) -> str:
        """The mmproj tensor name of a tower-relative Hugging Face name (``...weight`` / ``...bias``)."""
        module, _, leaf = hf_name.rpartition(".")
        if module in self.modules:
            return f"{self.modules[module]}.{leaf}"
        match = self.layer.fullmatch(module)
        if match and match.group(2) in self.parts:
            return f"v.blk.{int(match.group(1))}.{self.parts[match.group(2)]}.{leaf}"
        raise CheckpointError(f"no mmproj tensor corresponds to {hf_name}")
