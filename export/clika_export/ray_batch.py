"""Many exports at once as Ray tasks: ``clika-export --ray SRC... -o DIR``.

Each export is a pure function of its source's bytes (sha256) and the options, so its
task writes ``DIR/<cache key>`` (``clika_export.api.cache_key``) and a source already
exported with these options is found there and not exported again. ``DIR/<source name>``
links to its key's folder. Tasks run one CPU each (the export's check on one thread),
as many at a time as the cluster has CPUs; the batch reports each source as it finishes,
with the count and an ETA from the pace so far, and a failed source is reported by name
with its error while the others go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TASK_CPUS = 1


@dataclass(frozen=True)
class ExportOptions:
    precision: str = "int4"
    context_window: int | None = None
    builder: str = "auto"
    verify: bool = True
    quant_options: dict[str, Any] | None = None  # ``clika_quant.QuantOptions`` fields that differ


@dataclass
class BatchResult:
    folders: dict[str, Path] = field(default_factory=dict)  # source as given -> its model folder
    cached: list[str] = field(default_factory=list)  # sources found already exported
    failed: dict[str, str] = field(default_factory=dict)  # source as given -> its error


def export_one(source: str, out_dir: str, options: ExportOptions) -> tuple[str, bool]:
    """Export ``source`` into ``out_dir/<key>`` unless that folder is whole already: (key, cached)."""
    from clika_export.api import cache_key, export, source_sha256
    from clika_runtime.contract.manifest import Manifest, ManifestError

    key = cache_key(
        source_sha256(source),
        options.precision,
        options.context_window,
        options.builder,
        quant_options=options.quant_options,
    )
    folder = Path(out_dir) / key
    try:
        Manifest.read(folder)
        return key, True
    except ManifestError:
        pass
    export(
        source, folder, options.precision, options.context_window, progress=False,
        overwrite=True, verify=options.verify, threads=1, builder=options.builder,
        quant_options=options.quant_options,
    )  # fmt: skip
    return key, False


def export_batch(
    sources: Sequence[str | Path],
    out_dir: str | Path,
    options: ExportOptions,
    *,
    report: Callable[[str], None] = lambda _line: None,
) -> BatchResult:
    """Export every source as a Ray task on the connected cluster (``ray.init`` first)."""
    import ray

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    task = ray.remote(num_cpus=TASK_CPUS, max_retries=0)(export_one)
    pending = {task.remote(str(Path(s).resolve()), str(out), options): str(s) for s in sources}
    result, began, total = BatchResult(), time.monotonic(), len(pending)
    while pending:
        [ref], _ = ray.wait(list(pending), num_returns=1)
        source = pending.pop(ref)
        try:
            key, cached = ray.get(ref)
        except Exception as exc:  # the task's error, raised here: reported, the batch goes on
            result.failed[source] = _cause(exc)
            outcome = f"failed: {result.failed[source]}"
        else:
            result.folders[source] = _link(out, source, key)
            outcome = "cached" if cached else "exported"
            if cached:
                result.cached.append(source)
        done = total - len(pending)
        report(f"[{done}/{total}] {Path(source).name}: {outcome}{_eta(began, done, total)}")
    return result


def _link(out: Path, source: str, key: str) -> Path:
    """``out/<source name>`` pointing at ``out/<key>`` (a name taken by another source gets ``-2``...)."""
    stem = Path(source).name.removesuffix(".gguf") or key
    for n in range(1, 1000):
        link = out / (stem if n == 1 else f"{stem}-{n}")
        if link.is_symlink() and link.readlink() == Path(key):
            return link
        if not link.exists() and not link.is_symlink():
            link.symlink_to(key, target_is_directory=True)
            return link
    return out / key


def _eta(began: float, done: int, total: int) -> str:
    if done == total:
        return f" (all done in {time.monotonic() - began:.0f} s)"
    left = (time.monotonic() - began) / done * (total - done)
    return f" (ETA {left:.0f} s)"


def _cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    return f"{type(cause).__name__}: {cause}".splitlines()[0]


def start_local_ray(address: str | None, **options: Any) -> None:
    """Connect to ``address``'s cluster, else start Ray on 127.0.0.1 for this process."""
    import ray

    if address:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    else:
        ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False,
                 configure_logging=False, **options)  # fmt: skip
