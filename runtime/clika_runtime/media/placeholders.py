"""The prompt text that stands for an image: the placeholder tokens its embeddings fill.

A chat template emits one marker per image (``<image>`` for Idefics3 /
SmolVLM, ``<|image_pad|>`` between ``<|vision_start|>`` and ``<|vision_end|>``
for Qwen2-VL; ``<|AUDIO|>`` between ``<|audio_bos|>`` and ``<|audio_eos|>`` for
a Qwen2-Audio clip); the processor then expands each marker to as many image tokens
as the vision graph returns rows for that image, laid out as the checkpoint
was trained (Idefics3 names each tile's row and column and ends with the
global view). The expanded prompt's image-token positions take the image's
embeddings in order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

IDEFICS3_IMAGE = "<image>"
IDEFICS3_AROUND = "<fake_token_around_image>"
IDEFICS3_GLOBAL = "<global-img>"
QWEN2_VL_IMAGE = "<|image_pad|>"
QWEN2_VL_VIDEO = "<|video_pad|>"
VIDEO_MARKER = "<video>"  # SmolVLM2's template marker for one video
QWEN2_AUDIO = "<|AUDIO|>"
QWEN2_AUDIO_CLIP = "<|audio_bos|><|AUDIO|><|audio_eos|>"  # a clip as the chat template emits it


def idefics3_image_text(rows: int, cols: int, tokens_per_tile: int) -> str:
    """The text one Idefics3 image expands to (``rows`` = ``cols`` = 0: an unsplit image)."""
    tile = IDEFICS3_IMAGE * tokens_per_tile
    global_view = f"{IDEFICS3_AROUND}{IDEFICS3_GLOBAL}{tile}{IDEFICS3_AROUND}"
    if rows == 0 and cols == 0:
        return global_view
    lines = "".join(
        "".join(f"{IDEFICS3_AROUND}<row_{r + 1}_col_{c + 1}>{tile}" for c in range(cols)) + "\n"
        for r in range(rows)
    )
    return f"{lines}\n{global_view}"


def qwen2_vl_image_text(num_tokens: int) -> str:
    """The text one Qwen2-VL image's pad marker expands to (its merged-patch count)."""
    return QWEN2_VL_IMAGE * num_tokens


def qwen2_audio_text(num_tokens: int) -> str:
    """The text one Qwen2-Audio clip's marker expands to (one token per pooled encoder frame)."""
    return QWEN2_AUDIO * num_tokens


def expand_markers(text: str, marker: str, replacements: Sequence[str], *, argument: str = "images") -> str:
    """``text`` with its k-th ``marker`` replaced by ``replacements[k]``; the counts must agree."""
    pieces = text.split(marker)
    if len(pieces) - 1 != len(replacements):
        raise ValueError(
            f"{argument}: {len(replacements)} given but the prompt has {len(pieces) - 1} {marker} markers "
            "(attached media ride the chat template's parts; a marker typed into the text counts as another)"
        )
    out = [pieces[0]]
    for replacement, piece in zip(replacements, pieces[1:], strict=True):
        out += [replacement, piece]
    return "".join(out)


def expand_kinds(
    text: str, kinds: Mapping[str, Sequence[str]], *, video_marker: str
) -> tuple[str, list[tuple[str, int]]]:
    """``text`` with the k-th occurrence of each marker in ``kinds`` replaced by ``kinds[marker][k]``
    (in one pass, so a replacement holding a marker is never expanded again), and the
    ``(marker, k)`` order they appear in; each marker's count must agree with its replacements
    (a miscount of ``video_marker`` names the videos, of another the images)."""
    markers = [m for m in kinds if kinds[m] or m in text]
    if not markers:
        return text, []
    pieces = re.split("(" + "|".join(re.escape(m) for m in markers) + ")", text)
    counts = {m: pieces[1::2].count(m) for m in markers}
    for marker in markers:
        if counts[marker] != len(kinds[marker]):
            what = "videos" if marker == video_marker else "images"
            raise ValueError(
                f"{what}: {len(kinds[marker])} given but the prompt has {counts[marker]} {marker} markers "
                "(attached media ride the chat template's parts; a marker typed into the text counts as another)"
            )
    out, order, taken = [pieces[0]], [], dict.fromkeys(markers, 0)
    for marker, piece in zip(pieces[1::2], pieces[2::2], strict=True):
        k = taken[marker]
        taken[marker] += 1
        order.append((marker, k))
        out += [kinds[marker][k], piece]
    return "".join(out), order
