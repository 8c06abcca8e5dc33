"""Time of Qwen2.5-VL's windowed vision stage per image: preprocessing, window inputs, the graph.

Two parts, both on random weights that transformers builds here (no
checkpoint needs downloading):

* the tiny Qwen2.5-VL of the tests (hidden 32, 3 blocks, 2 x 2 merged-patch
  windows), exported with ``clika_export.media`` and run on one image;
* a paper estimate at Qwen2.5-VL-3B's vision dimensions (hidden 1280, 16
  heads, MLP 3420, patch 14, merge 2, 112-pixel windows, 32 blocks of which 4
  attend over the whole frame, text width 2048; the checkpoint's config.json):
  towers of 1 and 2 windowed blocks and of 1 windowed + 1 full block are timed
  on one 448x448 image (1024 patches, 16 windows), in alternating rounds;
  their differences are a windowed and a full block, and the estimate is
  ``fixed + 28 * windowed + 4 * full``. The window mask is a dense [L, L] bias, so a windowed block
  computes every score a full one does: the two cost about the same.

    python benchmarks/features/qwen2_5_vl_vision.py [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from stage_timing import median_ms, ort_session, print_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from qwen2_5_vl_helpers import QWEN2_5_VL_PROCESSOR, build_qwen2_5_vl_chat  # noqa: E402
from vision_helpers import random_image  # noqa: E402

from clika_export.media.vision_export import export_vision  # noqa: E402
from clika_runtime.media.processor_config import processor_settings  # noqa: E402
from clika_runtime.media.qwen2_5_vl_windows import window_inputs  # noqa: E402
from clika_runtime.media.qwen2_vl import Qwen2VLSettings, preprocess_qwen2_vl  # noqa: E402
from clika_runtime.media.qwen2_vl_positions import frame_attention_bias, rotary_tables  # noqa: E402

QWEN2_5_VL_3B = dict(
    hidden_size=1280, num_heads=16, intermediate_size=3420, patch_size=14, spatial_merge_size=2,
    temporal_patch_size=2, window_size=112, out_hidden_size=2048,
)  # fmt: skip
BLOCKS, FULL_BLOCKS = 32, 4


def _alternating_ms(runs: dict, rounds: int) -> dict[str, float]:
    """Median ms of each run, the runs alternating round by round (the machine's load hits all alike)."""
    for run in runs.values():
        run()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(found) for name, found in times.items()}


def _feeds(image: np.ndarray, settings: Qwen2VLSettings, details: dict) -> dict[str, np.ndarray]:
    patches = preprocess_qwen2_vl(image, settings)
    grids = [patches.grid_thw]
    cos, sin = rotary_tables(
        grids, head_dim=details["head_dim"], merge=details["merge_size"], theta=details["rope_theta"]
    )
    windows = window_inputs(grids, merge=details["merge_size"], window=details["window_size"])
    return {
        "pixel_values": patches.pixel_values,
        "rotary_cos": cos,
        "rotary_sin": sin,
        "attention_bias": frame_attention_bias(grids),
        **windows.feeds(),
    }


def tiny(work: Path, rounds: int, threads: int) -> dict:
    build_qwen2_5_vl_chat(work / "tiny-hf")
    spec = export_vision(work / "tiny-hf", work / "tiny")
    settings = processor_settings(QWEN2_5_VL_PROCESSOR)
    session = ort_session(work / "tiny" / spec.file, threads)
    image = random_image(384, 512, 0)
    feeds = _feeds(image, settings, spec.details)
    return {
        "model": "tiny qwen2.5-vl (hidden 32, 3 blocks), 512x384 image",
        "patches": int(feeds["pixel_values"].shape[0]),
        "preprocess_ms": median_ms(lambda: _feeds(image, settings, spec.details), rounds),
        "graph_ms": median_ms(lambda: session.run(None, feeds), rounds),
    }


def _tower(work: Path, name: str, depth: int, full: list[int]) -> tuple[Path, dict]:
    import torch
    import transformers

    config = transformers.Qwen2_5_VLConfig(
        vision_config={**QWEN2_5_VL_3B, "depth": depth, "fullatt_block_indexes": full},
        text_config=dict(hidden_size=2048, intermediate_size=64, num_hidden_layers=1, num_attention_heads=16,
                         num_key_value_heads=2, vocab_size=64, bos_token_id=None, eos_token_id=None),
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2_5_VLForConditionalGeneration(config).eval()
    folder = work / name
    model.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(QWEN2_5_VL_PROCESSOR))
    spec = export_vision(folder, folder / "out")
    return folder / "out" / spec.file, spec.details


def estimate(work: Path, rounds: int, threads: int) -> dict:
    image = random_image(448, 448, 1)
    settings = Qwen2VLSettings(max_pixels=448 * 448)
    runs = {}
    for name, depth, full in (("w1", 1, []), ("w2", 2, []), ("w1f1", 2, [1])):
        path, details = _tower(work, name, depth, full)
        feeds = _feeds(image, settings, details)
        runs[name] = lambda s=ort_session(path, threads), f=feeds: s.run(None, f)
    times = _alternating_ms(runs, rounds)
    windowed = times["w2"] - times["w1"]
    full = times["w1f1"] - times["w1"]
    fixed = times["w1"] - windowed
    # One block's multiply-adds (qkv + out projections, gated MLP, scores + weighted sum), so the
    # achieved rate lets a reader rescale the estimate to another machine.
    n, d, f = (
        int(feeds["pixel_values"].shape[0]),
        QWEN2_5_VL_3B["hidden_size"],
        QWEN2_5_VL_3B["intermediate_size"],
    )
    block_gflop = (2 * n * (4 * d * d + 3 * d * f) + 4 * n * n * d) / 1e9
    return {
        "model": "Qwen2.5-VL-3B vision dimensions (paper estimate), 448x448 image",
        "patches": int(feeds["pixel_values"].shape[0]),
        "tower_1_windowed_ms": times["w1"],
        "tower_2_windowed_ms": times["w2"],
        "tower_windowed_full_ms": times["w1f1"],
        "windowed_block_ms": windowed,
        "full_block_ms": full,
        "block_gflop": block_gflop,
        "achieved_gflop_per_s": block_gflop / (windowed / 1e3),
        "image_ms": fixed + (BLOCKS - FULL_BLOCKS) * windowed + FULL_BLOCKS * full,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = [tiny(work, args.rounds, args.threads), estimate(work, args.rounds, args.threads)]
    print_rows(f"qwen2.5-vl vision stage, {args.threads} threads, median of {args.rounds} runs (ms)", rows)


if __name__ == "__main__":
    main()
