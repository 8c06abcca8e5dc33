"""What a second process serving the same model folder adds to memory (Linux).

    python benchmarks/features/shared_pages.py path/to/model-folder

The runtime maps the folder's weights (external data, page-aligned, read in place), so two
processes on one folder share those pages. Each process here loads the folder, generates a
few tokens (so every weight page has been read), reports ready and waits; the figures come
from the kernel's /proc/PID/smaps_rollup: a process's private pages are what it alone
holds, its shared pages those the page cache holds once for both. Prints the folder's
size, then per process RSS, private and shared MiB, and what the second added (its
private pages) as a share of the folder.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

WORKER = """
import sys
from clika_runtime import modelverse
model = modelverse.load(sys.argv[1], threads=1)
model.generate("Write a haiku about tea", max_new_tokens=8, temperature=0.0)
print("ready", flush=True)
sys.stdin.read()
"""
FIELDS = ("Rss", "Private_Clean", "Private_Dirty", "Shared_Clean", "Shared_Dirty")


def rollup(pid: int) -> dict[str, float]:
    """The smaps_rollup fields of ``pid`` in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in FIELDS:
            values[name] = int(rest.split()[0]) / 1024
    return values


def started(folder: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise SystemExit(f"the worker on {folder} ended before it was ready (exit {process.wait()})")
    return process


def report(name: str, figures: dict[str, float]) -> float:
    private = figures["Private_Clean"] + figures["Private_Dirty"]
    shared = figures["Shared_Clean"] + figures["Shared_Dirty"]
    print(f"{name:8s} RSS {figures['Rss']:7.0f} MiB  private {private:7.0f} MiB  shared {shared:7.0f} MiB")
    return private


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    folder = ap.parse_args().folder
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
    print(f"folder   {size:7.0f} MiB  {folder}")
    first = started(folder)
    try:
        report("first", rollup(first.pid))
        second = started(folder)
        try:
            report("first", rollup(first.pid))
            added = report("second", rollup(second.pid))
        finally:
            second.communicate("")
    finally:
        first.communicate("")
    print(f"the second process added {added:.0f} MiB: {added / size:.2f} of the folder's size")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
