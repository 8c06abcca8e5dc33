"""The step graph's media inputs: packing media rows per chunk, and graphs that take them."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from clika_export.families import family_for
from clika_export.graph.paged_graph import derive_paged_graph
from clika_export.readers.hf import read_hf
from clika_runtime.contract import step_graph as io
from clika_runtime.contract.model_folder import open_session
from clika_runtime.contract.step_graph import MediaSpan, pack_media, pack_step, takes_media, text_only_media
from clika_runtime.engine.prompt_media import media_key_id, prompt_media


def test_media_rows_land_at_each_chunks_packed_offset():
    embeds = np.arange(12, dtype=np.float32).reshape(6, 2)
    span = MediaSpan(np.array([3, 4, 5, 10, 11, 12]), embeds)
    # Row 0: text only, 5 tokens; row 1 runs positions 4..10 of its prompt (a middle chunk).
    feeds = pack_media([(None, 0, 5), (span, 4, 7)], 2)
    assert feeds[io.MEDIA_ROWS].tolist() == [5 + 0, 5 + 1, 5 + 6]
    assert feeds[io.MEDIA_EMBEDS].tolist() == embeds[[1, 2, 3]].tolist()
    empty = pack_media([(None, 0, 5), (span, 20, 1)], 2)
    assert empty[io.MEDIA_ROWS].shape == (0,) and empty[io.MEDIA_EMBEDS].shape == (0, 2)


def test_takes_media_needs_both_inputs():
    assert not takes_media(["input_ids"])
    assert takes_media(["input_ids", *io.MEDIA_INPUTS])
    with pytest.raises(ValueError, match="media_rows"):
        takes_media(["input_ids", io.MEDIA_EMBEDS])


def test_prompt_media_pairs_placeholders_with_rows_and_names_a_mismatch():
    embeds = np.ones((2, 4), np.float32)
    media = prompt_media([5, 9, 9, 6], 9, [(embeds, "ab" * 32)])
    assert media is not None and media.positions.tolist() == [1, 2]
    assert media.keyed([5, 9, 9, 6, 7]) == [5, media_key_id("ab" * 32), media_key_id("ab" * 32), 6, 7]
    assert media_key_id("ab" * 32) != media_key_id("cd" * 32) and media_key_id("ab" * 32) < 0
    with pytest.raises(ValueError, match="images: the media take 2 prompt tokens but the prompt holds 3"):
        prompt_media([9, 9, 9], 9, [(embeds, "ab" * 32)])
    assert prompt_media([1, 2], 9, []) is None


@pytest.fixture(scope="module")
def graphs(tiny_llama_hf, tmp_path_factory):
    """The tiny llama's step graph built without and with the media inputs (and the paged twin)."""
    checkpoint = read_hf(tiny_llama_hf)
    family = family_for(checkpoint)
    plain, media = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("media")
    family.build(checkpoint, plain, 128)
    tables = family.build(checkpoint, media, 128, media_inputs=True).rope_tables
    paged = derive_paged_graph(media / "model.onnx", media, checkpoint.architecture)
    return checkpoint.architecture, tables, plain / "model.onnx", media / "model.onnx", paged


def _run(session, arch, rows, extra):
    shape = (len(rows), arch.num_kv_heads, 16, arch.head_dim)
    kv = {
        f"{kind}.{layer}": np.zeros(shape, np.float32)
        for layer in range(arch.num_layers)
        for kind in ("past_key", "past_value")
    }
    return session.run([io.LOGITS], {**pack_step(rows).feeds(), **kv, **extra})[0]


def test_a_text_step_on_the_media_graph_equals_the_text_graph(graphs):
    arch, tables, plain, media, paged = graphs
    plain_session = open_session(plain, ort.SessionOptions(), tables)
    media_session = open_session(media, ort.SessionOptions(), tables)
    rows = [(0, [1, 2, 3, 4], False), (0, [5, 6], False)]
    expected = _run(plain_session, arch, rows, {})
    got = _run(media_session, arch, rows, text_only_media(media_session.get_inputs()))  # M = 0
    np.testing.assert_array_equal(got, expected)
    embeds = np.random.default_rng(0).normal(size=(2, arch.hidden_size)).astype(np.float32)
    feeds = pack_media([(None, 0, 4), (MediaSpan(np.array([0, 1]), embeds), 0, 2)], arch.hidden_size)
    changed = _run(media_session, arch, rows, feeds)
    np.testing.assert_array_equal(changed[0], expected[0])  # the text row is untouched
    assert np.abs(changed[1] - expected[1]).max() > 1e-3  # the row whose tokens took the embeddings
    assert set(io.MEDIA_INPUTS) <= set(paged.inputs)  # the paged derivation keeps the inputs
