"""How much of a model folder its rotary tables take, stored or computed at load.

For each model folder (default: every export in the cache) prints the folder's
bytes, the bytes of its stored ``*.cos_cache`` / ``*.sin_cache`` initializers
(each stored once, however many graphs read it) and their share, and the bytes
its manifest's ``rope_tables`` has the runtime compute at load instead.

``--compare STORED COMPUTED`` takes two exports of one checkpoint, one that
stores its tables (exported before they were computed) and one that computes
them: checks the computed tables equal the stored ones bit for bit, and that
greedy tokens and their top-5 logprobs are identical in both KV modes, and
times opening each (alternating rounds).
``--positions`` times computing a table.

    python benchmarks/features/rope_tables.py [FOLDER ...] [--compare STORED COMPUTED] [--positions 32768 1048576]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from clika_runtime import modelverse
from clika_runtime.contract.manifest import Manifest
from clika_runtime.contract.model_folder import open_model_folder
from clika_runtime.contract.rope import cos_sin_caches
from clika_runtime.contract.rope_tables import computed_initializers
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.store.cache import exports_dir

PROMPTS = ("The capital of France is", "def fib(n):", "Once upon a time, in a land far away")


def is_table(name: str) -> bool:
    return name.endswith((".cos_cache", ".sin_cache"))


def table_bytes(folder: Path) -> int:
    """Bytes of the rotary tables stored in ``folder``'s graphs, each stored tensor counted once."""
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


def stored_tables(folder: Path) -> dict[str, np.ndarray]:
    """The tables ``folder``'s graphs store, read from its weights file."""
    tables = {}
    for graph in folder.glob("*.onnx"):
        model = onnx.load(str(graph), load_external_data=False)
        for init in model.graph.initializer:
            if is_table(init.name) and init.name not in tables and np.prod(init.dims) > 0:
                tables[init.name] = _read_table(folder, init)
    return tables


def _read_table(folder: Path, init: onnx.TensorProto) -> np.ndarray:
    if init.data_location != onnx.TensorProto.EXTERNAL:
        return numpy_helper.to_array(init)
    info = {e.key: e.value for e in init.external_data}  # read directly: the cache hard-links files
    count = int(np.prod(init.dims))
    data = np.fromfile(folder / info["location"], np.float32, count, offset=int(info.get("offset", 0)))
    return data.reshape(tuple(init.dims))


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


def compare(stored: Path, computed: Path) -> None:
    old, new = stored_tables(stored), Manifest.read(computed).rope_tables
    if not old or not new or stored_tables(computed):
        raise SystemExit("--compare takes a folder that stores its tables, then one that computes them")
    start = time.perf_counter()
    tables = computed_initializers(new)
    seconds = time.perf_counter() - start
    same = tables.keys() == old.keys() and all(np.array_equal(tables[k], v) for k, v in old.items())
    print(f"computed tables ({', '.join(sorted(tables))}) equal the stored ones bit for bit: {same}")
    print(f"computing them took {seconds:.3f} s")
    for label, folder in (("stored", stored), ("computed", computed)):
        print(f"{label}: {folder_bytes(folder) / 1e6:.1f} MB")
    for mode in ("continuous", "paged"):
        equal = replies(stored, mode) == replies(computed, mode)
        print(f"{mode}: tokens and top-5 logprobs identical: {equal}")
    opening = open_seconds(stored, computed, rounds=3)
    print(f"opening the folder (median of 3 alternating rounds): stored {opening[0]:.2f} s, "
          f"computed {opening[1]:.2f} s")  # fmt: skip


def open_seconds(*folders: Path, rounds: int) -> list[float]:
    """Median seconds to open each folder's continuous session, the folders alternating each round."""
    times: list[list[float]] = [[] for _ in folders]
    for _ in range(rounds):
        for i, folder in enumerate(folders):
            start = time.perf_counter()
            opened = open_model_folder(folder, threads=2)
            times[i].append(time.perf_counter() - start)
            del opened
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--compare", type=Path, nargs=2, default=None, metavar=("STORED", "COMPUTED"))
    parser.add_argument("--positions", type=int, nargs="*", default=[32768, 1 << 20])
    args = parser.parse_args()
    folders = args.folders or sorted(p.parent for p in exports_dir().glob("[!.]*/manifest.json"))
    print("| folder | family | context | folder MB | stored tables MB | share | computed at load MB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text())
        size, tables = folder_bytes(folder), table_bytes(folder)
        computed = sum(t.nbytes for t in Manifest.read(folder).rope_tables)
        family, context = manifest["architecture"]["family"], manifest["context_window"]
        print(f"| {folder.name[:12]} | {family} | {context} | {size / 1e6:.0f} | {tables / 1e6:.1f} | "
              f"{100 * tables / size:.1f}% | {computed / 1e6:.1f} |")  # fmt: skip
    for positions in args.positions:
        for rotary in (64, 256):
            start = time.perf_counter()
            cos, sin = cos_sin_caches(positions, rotary, 1e6, None)
            print(f"{positions} positions x {rotary // 2} frequencies: {(cos.nbytes + sin.nbytes) / 1e6:.1f} MB, "
                  f"computed in {time.perf_counter() - start:.3f} s")  # fmt: skip
    if args.compare is not None:
        compare(*args.compare)
    print("(load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + ")")


if __name__ == "__main__":
    main()
