"""A llama.cpp text GGUF and its ``mmproj`` GGUF exported as one vision model folder.

llama.cpp runs a vision model from two files (``llama-mtmd-cli -m MODEL.gguf
--mmproj MMPROJ.gguf``): the text model's GGUF, whose tokenizer metadata holds
the image token and the chat template, and the mmproj holding the tower. The
pair must belong together: the mmproj's projector type names the text family
it feeds (SmolVLM's ``idefics3`` feeds a ``llama`` text model, Qwen2-VL's
``qwen2vl_merger`` a ``qwen2vl`` one) and its projection width must be the
text model's hidden size. ``check_pair`` refuses a mismatched pair by name
before anything is built; ``attach_mmproj`` writes the tower into the exported
folder and records it in the manifest.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tokenizers import Tokenizer

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.media.mmproj_gguf import SUPPORTED_PROJECTORS, export_mmproj
from clika_export.media.vision_export import attach_vision
from clika_export.readers.gguf_file import GGUFFile, GGUFMetadata
from clika_runtime.contract.manifest import Manifest

# Our vision family -> the text GGUF architecture it feeds, and the token the chat template
# spells for an image (the runtime expands it into the image's positions).
TEXT_ARCHITECTURES = {"idefics3": "llama", "qwen2_vl": "qwen2vl"}
IMAGE_TOKENS = {"idefics3": "<image>", "qwen2_vl": "<|image_pad|>"}


def check_pair(text: Path, mmproj: Path) -> str:
    """The vision family of ``mmproj``, refused by name unless it fits the text GGUF ``text``."""
    if not mmproj.exists():
        raise CheckpointError(f"the mmproj file {mmproj} does not exist")
    if mmproj.suffix.lower() != ".gguf" or not mmproj.is_file():
        raise CheckpointError(f"the mmproj file {mmproj.name} is not a .gguf file")
    if text.suffix.lower() != ".gguf" or not text.is_file():
        raise CheckpointError(
            f"an mmproj file goes with a GGUF text model (llama.cpp's pair); {text.name} is not a .gguf file"
        )
    text_meta, vision_meta = GGUFMetadata(GGUFFile(text)), GGUFMetadata(GGUFFile(mmproj))
    arch = text_meta.string("general.architecture")
    fed = {architecture: family for family, architecture in TEXT_ARCHITECTURES.items()}
    if arch not in fed:
        raise CheckpointError(
            f"{text.name}: a {arch!r} text model has no vision path (an mmproj is read for "
            f"{', '.join(f'{a} ({f})' for a, f in sorted(fed.items()))} text models)"
        )
    if vision_meta.string("general.architecture") != "clip":
        raise CheckpointError(f"{mmproj.name}: not an mmproj file (general.architecture is not 'clip')")
    projector = vision_meta.string("clip.projector_type", "")
    family = SUPPORTED_PROJECTORS.get(projector)
    if family is None:
        raise CheckpointError(
            f"{mmproj.name}: projector type {projector!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_PROJECTORS)})"
        )
    if family != fed[arch]:
        raise CheckpointError(
            f"{mmproj.name}: projector type {projector!r} does not feed a {arch!r} text model "
            f"({text.name} takes a {_projector_of(fed[arch])!r} mmproj)"
        )
    width = vision_meta.integer("clip.vision.projection_dim", low=1)
    hidden = text_meta.integer(f"{arch}.embedding_length", low=1)
    if width != hidden:
        raise CheckpointError(
            f"{mmproj.name}: the projector makes {width}-wide embeddings, but the text model "
            f"{text.name} is {hidden} wide"
        )
    return family


def attach_mmproj(mmproj: Path, family: str, checkpoint: Checkpoint, folder: Path) -> Manifest:
    """Write ``mmproj``'s vision graph into the exported ``folder`` and record it in the manifest."""
    token = IMAGE_TOKENS[family]
    token_id = Tokenizer.from_str(checkpoint.tokenizer_json).token_to_id(token)
    if token_id is None:
        raise CheckpointError(
            f"{checkpoint.source_name}: the tokenizer has no {token!r} token, the image token "
            f"a {family} chat template places"
        )
    spec = export_mmproj(mmproj, folder)
    if spec.text_hidden_size != checkpoint.architecture.hidden_size:
        raise CheckpointError(
            f"{mmproj.name}: the projector makes {spec.text_hidden_size}-wide embeddings, but the text "
            f"model is {checkpoint.architecture.hidden_size} wide"
        )
    spec = dataclasses.replace(spec, image_token_id=token_id)
    return attach_vision(folder, spec)


def _projector_of(family: str) -> str:
    return next(projector for projector, fed in SUPPORTED_PROJECTORS.items() if fed == family)
