"""Time of the vision stage per image: preprocessing plus the vision graph.

Two parts, both on random weights that transformers builds here (no
multimodal checkpoint needs downloading):

* the tiny Idefics3 and Qwen2-VL checkpoints of the tests, exported with
  ``clika_export.media`` and run through onnxruntime on one image;
* a paper estimate for SmolVLM-256M: 1- and 2-layer towers at its real
  dimensions are timed on one 512x512 tile, their difference is the cost of a
  layer, and the estimate is ``fixed + 12 * layer`` per tile times the tiles an
  image makes (13 for a 4:3 photo resized to the processor's 2048 longest edge).

SmolVLM-256M's dimensions: SigLIP-B/16 at 512 px (hidden 768, 12 layers, 12
heads, MLP 3072, patch 16), pixel-shuffle scale 4 into the 576-wide SmolLM2
text model, processor longest edge 2048 and 512 px tiles. Sources: the model
card (a 93M-parameter encoder, 64 visual tokens per 512x512 tile, so 1024
patches of 16 px folded 4x4), a config.json derived from the checkpoint
(scale_factor 4, text hidden_size 576) and transformers' SmolVLM docs (the
4 * 512 longest edge, 512 px tiles).

    python benchmarks/features/vision.py [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from stage_timing import median_ms, ort_session, print_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from vision_helpers import (  # noqa: E402  (the tests' tiny checkpoints)
    IDEFICS3_PROCESSOR,
    QWEN2_VL_PROCESSOR,
    build_idefics3,
    build_qwen2_vl,
    random_image,
)

from clika_export.media.vision_export import export_vision  # noqa: E402
from clika_runtime.media.idefics3 import preprocess_idefics3  # noqa: E402
from clika_runtime.media.processor_config import processor_settings  # noqa: E402
from clika_runtime.media.qwen2_vl import preprocess_qwen2_vl  # noqa: E402
from clika_runtime.media.qwen2_vl_positions import frame_attention_bias, rotary_tables  # noqa: E402

SMOLVLM_256M = dict(
    hidden_size=768, intermediate_size=3072, num_attention_heads=12, image_size=512, patch_size=16
)  # fmt: skip
SMOLVLM_256M_LAYERS = 12
SMOLVLM_256M_TEXT_HIDDEN = 576
SMOLVLM_256M_SCALE = 4
SMOLVLM_PROCESSOR = {
    **IDEFICS3_PROCESSOR,
    "max_image_size": {"longest_edge": 512},
    "size": {"longest_edge": 2048},
}


def tiny_idefics3(work: Path, image: np.ndarray, rounds: int, threads: int) -> dict:
    build_idefics3(work / "idefics3-hf")
    spec = export_vision(work / "idefics3-hf", work / "idefics3")
    settings = processor_settings(IDEFICS3_PROCESSOR)
    session = ort_session(work / "idefics3" / spec.file, threads)
    pixels = preprocess_idefics3(image, settings).pixel_values
    return {
        "model": "tiny idefics3 (hidden 32, 2 layers, 64 px tiles)",
        "tiles": int(pixels.shape[0]),
        "preprocess_ms": median_ms(lambda: preprocess_idefics3(image, settings), rounds),
        "graph_ms": median_ms(lambda: session.run(None, {"pixel_values": pixels}), rounds),
    }


def tiny_qwen2_vl(work: Path, image: np.ndarray, rounds: int, threads: int) -> dict:
    build_qwen2_vl(work / "qwen2-vl-hf")
    spec = export_vision(work / "qwen2-vl-hf", work / "qwen2-vl")
    settings = processor_settings(QWEN2_VL_PROCESSOR)
    session = ort_session(work / "qwen2-vl" / spec.file, threads)
    d = spec.details

    def prepare() -> dict:
        patches = preprocess_qwen2_vl(image, settings)
        cos, sin = rotary_tables(
            [patches.grid_thw], head_dim=d["head_dim"], merge=d["merge_size"], theta=d["rope_theta"]
        )
        bias = frame_attention_bias([patches.grid_thw])
        return {
            "pixel_values": patches.pixel_values,
            "rotary_cos": cos,
            "rotary_sin": sin,
            "attention_bias": bias,
        }

    feeds = prepare()
    return {
        "model": "tiny qwen2-vl (embed 32, 2 layers)",
        "patches": int(feeds["pixel_values"].shape[0]),
        "preprocess_ms": median_ms(prepare, rounds),
        "graph_ms": median_ms(lambda: session.run(None, feeds), rounds),
    }


def _smolvlm_tower(work: Path, layers: int) -> Path:
    import torch
    import transformers

    config = transformers.Idefics3Config(
        vision_config={**SMOLVLM_256M, "num_hidden_layers": layers},
        text_config=dict(
            hidden_size=SMOLVLM_256M_TEXT_HIDDEN, intermediate_size=64, num_hidden_layers=1, num_attention_heads=9,
            num_key_value_heads=3, vocab_size=64,
        ),
        scale_factor=SMOLVLM_256M_SCALE,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Idefics3ForConditionalGeneration(config).eval()
    folder = work / f"smolvlm-{layers}"
    model.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(SMOLVLM_PROCESSOR))
    export_vision(folder, folder / "out")
    return folder / "out" / "vision.onnx"


def smolvlm_estimate(work: Path, rounds: int, threads: int) -> dict:
    tile = np.random.default_rng(0).standard_normal((1, 3, 512, 512)).astype(np.float32)
    one, two = (
        median_ms(
            lambda s=ort_session(_smolvlm_tower(work, n), threads): s.run(None, {"pixel_values": tile}),
            rounds,
        )
        for n in (1, 2)
    )
    layer = two - one
    per_tile = one - layer + SMOLVLM_256M_LAYERS * layer
    # One layer's multiply-adds on a tile (QKV + out projections, MLP, scores + weighted sum), so the
    # achieved rate lets a reader rescale the estimate to another machine.
    n, d, f = (
        (SMOLVLM_256M["image_size"] // SMOLVLM_256M["patch_size"]) ** 2,
        SMOLVLM_256M["hidden_size"],
        3072,
    )
    layer_gflop = (2 * n * (4 * d * d + 2 * d * f) + 4 * n * n * d) / 1e9
    photo = random_image(1536, 2048, 1)  # a 4:3 photo at the processor's longest edge
    tiles = preprocess_idefics3(photo, processor_settings(SMOLVLM_PROCESSOR)).pixel_values.shape[0]
    return {
        "model": "SmolVLM-256M dimensions (paper estimate)",
        "tower_1_layer_ms": one,
        "tower_2_layers_ms": two,
        "layer_ms": layer,
        "layer_gflop": layer_gflop,
        "achieved_gflop_per_s": layer_gflop / (layer / 1e3),
        "tile_ms": per_tile,
        "tiles_per_4x3_photo": int(tiles),
        "photo_ms": per_tile * tiles,
        "preprocess_photo_ms": median_ms(
            lambda: preprocess_idefics3(photo, processor_settings(SMOLVLM_PROCESSOR)), max(1, rounds // 2)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    image = random_image(384, 512, 0)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = [
            tiny_idefics3(work, image, args.rounds, args.threads),
            tiny_qwen2_vl(work, image, args.rounds, args.threads),
            smolvlm_estimate(work, args.rounds, args.threads),
        ]
    print_rows(
        f"vision stage, {args.threads} threads, median of {args.rounds} runs (ms); tiny models on a 512x384 image",
        rows,
    )


if __name__ == "__main__":
    main()
