"""llama.cpp's pair (a text GGUF and its mmproj GGUF) exported as one vision model folder.

Tiny random Idefics3 and Qwen2-VL checkpoints are built by transformers; their text models are
written as llama / qwen2vl GGUFs and their towers as mmproj files, in float32 as llama.cpp's
converter lays them out (``tests/mmproj_files.py``). The exported folder's greedy reply to an
image must equal transformers' generate on the same checkpoint; mismatched pairs are refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
from mmproj_files import write_idefics3_mmproj, write_idefics3_pair, write_qwen2_vl_pair, write_text_gguf
from support.lazy import torch, transformers
from vision_helpers import (
    IDEFICS3_IMAGE_TOKEN,
    IDEFICS3_PROCESSOR,
    QWEN2_VL_IMAGE_TOKEN,
    QWEN2_VL_TEMPLATE,
    build_idefics3,
    idefics3_tokenizer,
    qwen2_vl_processor,
    qwen2_vl_tokenizer,
    random_image,
)

from clika_export.api import cache_key, cached_export, export
from clika_export.checkpoint import CheckpointError
from clika_runtime import Tensor, modelverse
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.step_graph import MEDIA_INPUTS, MROPE_INPUTS

NEW_TOKENS = 10
QUESTION = "What is this?"


@pytest.fixture(scope="module")
def idefics3_pair(tmp_path_factory):
    return write_idefics3_pair(tmp_path_factory.mktemp("idefics3-pair"))


@pytest.fixture(scope="module")
def qwen2_vl_pair(tmp_path_factory):
    return write_qwen2_vl_pair(tmp_path_factory.mktemp("qwen2-vl-pair"))


def greedy_ids(model, image: np.ndarray) -> list[int]:
    batches = model.stream_generate(
        prompt=QUESTION, images=[Tensor(image)], decode=False, max_new_tokens=NEW_TOKENS, temperature=0.0,
        ignore_eos=True,
    )  # fmt: skip
    return [token for batch in batches for token in batch]


def rendered(model) -> str:
    return model.render(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    )


def idefics3_processor():
    """transformers' own Idefics3 processor over the same tokenizer and image settings."""
    settings = {k: v for k, v in IDEFICS3_PROCESSOR.items() if k != "image_processor_type"}
    return transformers.Idefics3Processor(
        image_processor=transformers.Idefics3ImageProcessor(**settings),
        tokenizer=transformers.PreTrainedTokenizerFast(tokenizer_object=idefics3_tokenizer()),
        image_seq_len=16,  # (64 / 8)^2 patches per tile, pixel-shuffled by 2 x 2
    )


def transformers_reply(hf_model, processor, text: str, image: np.ndarray) -> tuple[list[int], list[int]]:
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    with torch.no_grad():
        out = hf_model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    prompt = inputs["input_ids"][0].tolist()
    return prompt, out[0, len(prompt) :].tolist()


def test_smolvlm_pair_replies_as_transformers_does(idefics3_pair, tmp_path):
    hf_model, _, text, mmproj = idefics3_pair
    folder = cached_export(text, context_window=512, progress=False, cache=tmp_path, mmproj=mmproj)
    assert cached_export(text, context_window=512, progress=False, cache=tmp_path, mmproj=mmproj) == folder
    manifest = Manifest.read(folder)
    assert manifest.architecture.family == "llama" and manifest.provenance.source_format == "gguf"
    assert manifest.vision is not None and manifest.vision.family == "idefics3"
    assert manifest.vision.image_token_id == IDEFICS3_IMAGE_TOKEN  # from the GGUF's vocabulary
    for key, spec in manifest.graphs.items():
        assert set(MEDIA_INPUTS) <= set(spec.inputs), key
    image = random_image(90, 150, 3)
    model = modelverse.load(folder, threads=1)
    try:
        assert model.supports_vision
        ours = greedy_ids(model, image)
        prompt, expected = transformers_reply(hf_model, idefics3_processor(), rendered(model), image)
        assert model.report.prompt_tokens == len(prompt)
    finally:
        model.close()
    assert ours == expected


def test_qwen2_vl_pair_replies_as_transformers_does(qwen2_vl_pair, tmp_path):
    hf_model, hf, text, mmproj = qwen2_vl_pair
    folder = export(text, tmp_path / "model", context_window=512, progress=False, mmproj=mmproj)
    manifest = Manifest.read(folder)
    assert manifest.architecture.family == "qwen2"
    assert manifest.vision is not None and manifest.vision.family == "qwen2_vl"
    assert manifest.vision.image_token_id == QWEN2_VL_IMAGE_TOKEN
    for key, spec in manifest.graphs.items():
        assert set(MEDIA_INPUTS) | set(MROPE_INPUTS) <= set(spec.inputs), key
    image = random_image(70, 110, 3)
    model = modelverse.load(folder, threads=1)
    try:
        ours = greedy_ids(model, image)
        prompt, expected = transformers_reply(hf_model, qwen2_vl_processor(hf), rendered(model), image)
        assert model.report.prompt_tokens == len(prompt)
    finally:
        model.close()
    assert ours == expected


def test_the_cache_key_holds_the_mmproj_sha256():
    plain = cache_key("a" * 64, "fp32", 512)
    assert cache_key("a" * 64, "fp32", 512, mmproj_sha256=None) == plain  # text-only keys unchanged
    with_b, with_c = (cache_key("a" * 64, "fp32", 512, mmproj_sha256=h * 64) for h in "bc")
    assert len({plain, with_b, with_c}) == 3


# -- refusals ------------------------------------------------------------------------


def test_an_mmproj_of_another_family_is_refused_by_name(idefics3_pair, qwen2_vl_pair, tmp_path):
    _, _, smol_text, smol_mmproj = idefics3_pair
    _, _, qwen_text, qwen_mmproj = qwen2_vl_pair
    with pytest.raises(
        CheckpointError, match="projector type 'qwen2vl_merger' does not feed a 'llama' text model"
    ):
        export(smol_text, tmp_path / "a", progress=False, mmproj=qwen_mmproj)
    with pytest.raises(
        CheckpointError, match="projector type 'idefics3' does not feed a 'qwen2vl' text model"
    ):
        export(qwen_text, tmp_path / "b", progress=False, mmproj=smol_mmproj)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_unsupported_projector_or_a_missing_mmproj_is_refused_by_name(
    idefics3_pair, qwen2_vl_pair, tmp_path
):
    smol, _, _, _ = idefics3_pair
    _, _, qwen_text, _ = qwen2_vl_pair
    # llama.cpp writes Qwen2.5-VL's text model as qwen2vl too; its tower is another projector type.
    other = write_idefics3_mmproj(smol, tmp_path / "mmproj-other.gguf", projector="qwen2.5vl_merger")
    with pytest.raises(CheckpointError, match="projector type 'qwen2.5vl_merger' is not supported"):
        export(qwen_text, tmp_path / "a", progress=False, mmproj=other)
    with pytest.raises(CheckpointError, match="mmproj file .*absent.gguf does not exist"):
        export(qwen_text, tmp_path / "b", progress=False, mmproj=tmp_path / "absent.gguf")


def test_an_mmproj_of_another_width_is_refused_by_name(idefics3_pair, tmp_path):
    _, _, text, _ = idefics3_pair
    narrow, _ = build_idefics3(tmp_path / "narrow")  # a 48-wide text model's tower
    mmproj = write_idefics3_mmproj(narrow, tmp_path / "mmproj-narrow.gguf")
    with pytest.raises(CheckpointError, match="makes 48-wide embeddings, but the text model .* is 64 wide"):
        export(text, tmp_path / "out", progress=False, mmproj=mmproj)


def test_an_mmproj_beside_a_hugging_face_folder_is_refused(idefics3_pair, tmp_path):
    _, hf, _, mmproj = idefics3_pair
    with pytest.raises(
        CheckpointError, match="an mmproj file goes with a GGUF text model .* is not a .gguf file"
    ):
        export(hf, tmp_path / "out", progress=False, mmproj=mmproj)


def test_a_text_family_with_no_vision_path_is_refused_by_name(idefics3_pair, tiny_gguf, tmp_path):
    _, _, _, mmproj = idefics3_pair
    text = tiny_gguf(family="qwen2").path
    with pytest.raises(CheckpointError, match="a 'qwen2' text model has no vision path"):
        export(text, tmp_path / "out", progress=False, mmproj=mmproj)


def test_a_text_model_passed_as_the_mmproj_is_refused(idefics3_pair, tmp_path):
    _, _, text, _ = idefics3_pair
    with pytest.raises(CheckpointError, match="not an mmproj file"):
        export(text, tmp_path / "out", progress=False, mmproj=text)


def test_a_qwen2_vl_text_gguf_alone_exports_a_text_model(qwen2_vl_pair, tmp_path):
    hf_model, _, text, _ = qwen2_vl_pair
    folder = export(text, tmp_path / "model", context_window=512, progress=False)
    manifest = Manifest.read(folder)
    assert manifest.vision is None and set(MROPE_INPUTS) <= set(manifest.graphs["continuous"].inputs)
    model = modelverse.load(folder, threads=1)
    try:
        assert not model.supports_vision
        ids = model.tokenizer.encode(model.render([{"role": "user", "content": "hello there"}]))
        batches = model.stream_generate(
            prompt="hello there", decode=False, max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True
        )
        ours = [token for batch in batches for token in batch]
        assert model.report.prompt_tokens == len(ids)
    finally:
        model.close()
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        expected = hf_model.generate(input_ids=input_ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    assert ours == expected[0, len(ids) :].tolist()  # M-RoPE of text alone: the plain positions


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ([2, 3, 3, 5], r"qwen2vl\.rope\.dimension_sections must list 3 positive sections"),
        ([2, 0, 6, 0], r"qwen2vl\.rope\.dimension_sections must list 3 positive sections"),
        ([2, 3, 2, 0], r"mrope_section \[2, 3, 2\] covers 7"),
    ],
)
def test_bad_mrope_sections_in_the_text_gguf_are_refused_by_name(qwen2_vl_pair, tmp_path, sections, message):
    hf_model, _, _, mmproj = qwen2_vl_pair
    text = write_text_gguf(
        hf_model, tmp_path / "bad.gguf", qwen2_vl_tokenizer(), arch="qwen2vl", template=QWEN2_VL_TEMPLATE,
        eos="<|im_end|>", sections=sections,
    )  # fmt: skip
    with pytest.raises(CheckpointError, match=message):
        export(text, tmp_path / "out", progress=False, mmproj=mmproj)
    assert not (tmp_path / "out").exists()
