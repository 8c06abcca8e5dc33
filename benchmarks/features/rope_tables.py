"""How much of a model folder its rotary tables take, and whether ORT could take them at load instead.

For each model folder (default: every export in the cache) prints the folder's
bytes, the bytes of its ``*.cos_cache`` / ``*.sin_cache`` initializers (each
stored once, however many graphs read it) and their share. ``--check FOLDER``
then copies FOLDER with every table replaced by an empty ``[0, rotary_dim / 2]``
placeholder, supplies the tables at session creation through
``SessionOptions.add_initializer`` (computed with the export's own
``cos_sin_caches``) and compares greedy tokens and their top-5 logprobs with
the stored folder in both KV modes; ``--positions`` times computing a table.

    python benchmarks/features/rope_tables.py [FOLDER ...] [--check FOLDER] [--positions 32768 1048576]

The runtime has no hook for supplied initializers, so ``--check`` wraps
``clika_runtime.model_folder.open_session`` for the copied folder only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from clika_export.graph.rope import cos_sin_caches
from clika_runtime import model_folder, modelverse
from clika_runtime.engine.types import GenerationConfig
from clika_runtime.store.cache import exports_dir

PROMPTS = ("The capital of France is", "def fib(n):", "Once upon a time, in a land far away")


def is_table(name: str) -> bool:
    return name.endswith((".cos_cache", ".sin_cache"))


def table_bytes(folder: Path) -> int:
    """Bytes of the rotary tables in ``folder``'s graphs, each stored tensor counted once."""
    seen: set[tuple] = set()
    total = 0
    for graph in folder.glob("*.onnx"):
        for init in onnx.load(str(graph), load_external_data=False).graph.initializer:
            if is_table(init.name):
                where = tuple((e.key, e.value) for e in init.external_data) or (graph.name, init.name)
                if where not in seen:
                    seen.add(where)
                    total += int(np.prod(init.dims)) * 4
    return total


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def tables_of(folder: Path) -> dict[str, np.ndarray]:
    """The tables ``folder``'s graphs hold, read from its weights (what a runtime would compute)."""
    tables = {}
    for graph in folder.glob("*.onnx"):
        model = onnx.load(str(graph), load_external_data=False)
        for init in model.graph.initializer:
            if is_table(init.name) and init.name not in tables:
                tables[init.name] = _read_table(folder, init)
    return tables


def _read_table(folder: Path, init: onnx.TensorProto) -> np.ndarray:
    if init.data_location != onnx.TensorProto.EXTERNAL:
        return numpy_helper.to_array(init)
    info = {e.key: e.value for e in init.external_data}  # read directly: the cache hard-links files
    count = int(np.prod(init.dims))
    data = np.fromfile(folder / info["location"], np.float32, count, offset=int(info.get("offset", 0)))
    return data.reshape(tuple(init.dims))


def computed_tables(folder: Path, stored: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The global rope's tables computed from the manifest (a folder with per-layer ropes is refused)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    arch = manifest["architecture"]
    if set(stored) != {"model.rotary.cos_cache", "model.rotary.sin_cache"}:
        raise SystemExit(f"--check takes folders with one global rope; {folder} has {sorted(stored)}")
    rotary = 2 * stored["model.rotary.cos_cache"].shape[1]
    cos, sin = cos_sin_caches(manifest["context_window"], rotary, arch["rope_theta"], arch["rope_scaling"])
    return {"model.rotary.cos_cache": cos, "model.rotary.sin_cache": sin}


def placeholder_copy(folder: Path, target: Path) -> None:
    target.mkdir()
    for item in folder.iterdir():
        if item.suffix != ".onnx":
            shutil.copy(item, target / item.name)
    for graph in folder.glob("*.onnx"):
        model = onnx.load(str(graph), load_external_data=False)
        for init in model.graph.initializer:
            if is_table(init.name):
                empty = np.zeros((0, init.dims[1]), np.float32)
                init.CopyFrom(numpy_helper.from_array(empty, init.name))
        onnx.save(model, str(target / graph.name))


def replies(folder: Path, mode: str) -> list:
    model = modelverse.load(folder, threads=2, kv_cache_mode=mode)
    try:
        out = []
        for prompt in PROMPTS:
            config = GenerationConfig(max_new_tokens=24, ignore_eos=True, logprobs=5)
            stream = model.engine.submit(model.tokenizer.encode(prompt), config)
            out.append([(d.token_ids, [(p.token_id, p.logprob, p.top) for p in d.logprobs]) for d in stream])
        return out
    finally:
        model.close()


def check(folder: Path) -> None:
    tables = computed_tables(folder, tables_of(folder))
    same = all(np.array_equal(tables[k], v) for k, v in tables_of(folder).items())
    print(f"computed tables equal the stored ones bit for bit: {same}")
    values = {name: ort.OrtValue.ortvalue_from_numpy(table) for name, table in tables.items()}
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "computed"
        placeholder_copy(folder, copy)
        stored_open = model_folder.open_session

        def open_session(path: Path, options: ort.SessionOptions) -> ort.InferenceSession:
            if Path(path).parent == copy:
                for name, value in values.items():
                    options.add_initializer(name, value)
            return stored_open(path, options)

        model_folder.open_session = open_session
        try:
            for mode in ("continuous", "paged"):
                equal = replies(folder, mode) == replies(copy, mode)
                print(f"{mode}: tokens and top-5 logprobs identical: {equal}")
        finally:
            model_folder.open_session = stored_open


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--check", type=Path, default=None)
    parser.add_argument("--positions", type=int, nargs="*", default=[32768, 1 << 20])
    args = parser.parse_args()
    folders = args.folders or sorted(p.parent for p in exports_dir().glob("[!.]*/manifest.json"))
    print("| folder | family | context | folder MB | tables MB | share |")
    print("|---|---|---:|---:|---:|---:|")
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text())
        size, tables = folder_bytes(folder), table_bytes(folder)
        family, context = manifest["architecture"]["family"], manifest["context_window"]
        print(f"| {folder.name[:12]} | {family} | {context} | {size / 1e6:.0f} | {tables / 1e6:.1f} | "
              f"{100 * tables / size:.1f}% |")  # fmt: skip
    for positions in args.positions:
        start = time.perf_counter()
        cos, sin = cos_sin_caches(positions, 128, 1e6, None)
        print(f"{positions} positions x 64 frequencies: {(cos.nbytes + sin.nbytes) / 1e6:.1f} MB, "
              f"computed in {time.perf_counter() - start:.3f} s")  # fmt: skip
    if args.check is not None:
        check(args.check)
    print("(load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + ")")


if __name__ == "__main__":
    main()
