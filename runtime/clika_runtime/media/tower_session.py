"""How a media tower (vision or audio) opens its graph: one ORT session, its inputs checked."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from clika_runtime.contract.manifest import AudioSpec, ManifestError, VisionSpec
from clika_runtime.contract.model_folder import open_session, session_options


def open_tower_session(
    folder: Path,
    spec: VisionSpec | AudioSpec,
    threads: int | None,
    family_inputs: Collection[str] | None = None,
) -> Any:
    """The ORT session of ``spec.file``; ManifestError unless its inputs are the manifest's (and
    ``family_inputs``, the family's, when given)."""
    # A tower computes its own positions inside its graph: no rotary table is supplied.
    session = open_session(folder / spec.file, session_options(threads), ())
    names = {i.name for i in session.get_inputs()}
    if names != set(spec.inputs) or (family_inputs is not None and names != set(family_inputs)):
        listed = [i.name for i in session.get_inputs()]
        raise ManifestError(f"{spec.file} takes {listed}, the manifest names {list(spec.inputs)}")
    return session
