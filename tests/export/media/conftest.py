"""The tiny vision checkpoints the media export tests read, from the session zoo."""

from __future__ import annotations

import pytest
from vision_helpers import build_idefics3, build_qwen2_vl


@pytest.fixture(scope="module")
def idefics3(tiny_zoo):
    """(transformers model, checkpoint folder) of a tiny Idefics3."""
    return tiny_zoo.checkpoint(build_idefics3)


@pytest.fixture(scope="module")
def qwen2_vl(tiny_zoo):
    """(transformers model, checkpoint folder) of a tiny Qwen2-VL."""
    return tiny_zoo.checkpoint(build_qwen2_vl)
