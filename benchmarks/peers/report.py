"""Turn a run's records into tables: medians with min-max, and our ratio to each peer.

    python report.py RUN_DIR        # re-print a finished run (reads RUN_DIR/records.jsonl)

Every figure is the median over all rounds (and repeats within a round), with
the min-max beside it. A ratio is our median over the peer's, oriented so that
above 1 means ours is better (faster, less memory).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import common_prefix

OURS = "clika"


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    workload: str
    field: str
    higher_is_better: bool | None  # None: informational, no ratio
    digits: int = 1


FIGURES = (
    Figure("w1_ttft", "W1 TTFT ms", "W1", "ttft_ms", False, 0),
    Figure("w1_decode", "W1 decode tok/s", "W1", "decode_tok_s", True),
    Figure("w2_prefill", "W2 prefill tok/s", "W2", "prefill_tok_s", True),
    Figure("w3_agg", "W3 aggregate tok/s", "W3", "agg_tok_s", True),
    Figure("w3_p50", "W3 latency p50 s", "W3", "lat_p50_s", False, 2),
    Figure("w3_p95", "W3 latency p95 s", "W3", "lat_p95_s", False, 2),
    Figure("w3_ttft", "W3 TTFT p50 ms", "W3", "ttft_p50_ms", False, 0),
    Figure("w4_ttft", "W4 turn-5 TTFT ms", "W4", "ttft_turn5_ms", False, 0),
    Figure("w4_prefilled", "W4 turn-5 tokens prefilled", "W4", "prefilled_turn5", None, 0),
    Figure("rss_w1", "peak RSS after W1 MiB", "W1", "peak_rss_mib", False, 0),
    Figure("rss_all", "peak RSS whole process MiB", "process", "peak_rss_mib", False, 0),
    Figure("bandwidth", "decode weight GB/s", "W1", "weight_gb_s", True, 2),
    Figure("weights", "weight MiB read per token", "W1", "weight_mib_per_token", None, 1),
    Figure("load", "load s", "process", "load_s", False, 2),
)


def load_records(run_dir: Path) -> list[dict]:
    with open(run_dir / "records.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def values(records: list[dict], system: str, fig: Figure) -> list[float]:
    return [
        r[fig.field]
        for r in records
        if r["system"] == system and r["workload"] == fig.workload and r.get(fig.field) is not None
    ]


def summarize(records: list[dict], systems: list[str]) -> dict:
    """{system: {figure key: (median, min, max, n)}} for every figure with data."""
    out: dict = {}
    for system in systems:
        for fig in FIGURES:
            xs = values(records, system, fig)
            if xs:
                out.setdefault(system, {})[fig.key] = (statistics.median(xs), min(xs), max(xs), len(xs))
    return out


def ratio(ours: float, peer: float, higher_is_better: bool) -> float | None:
    if not ours or not peer:
        return None
    return ours / peer if higher_is_better else peer / ours


def fmt(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def cell(stat, digits: int) -> str:
    if stat is None:
        return "-"
    med, lo, hi, n = stat
    return f"{fmt(med, digits)} ({fmt(lo, digits)}-{fmt(hi, digits)})" if n > 1 else fmt(med, digits)


def figures_table(summary: dict, systems: list[str]) -> list[str]:
    lines = ["| figure | " + " | ".join(systems) + " |", "|---" * (len(systems) + 1) + "|"]
    for fig in FIGURES:
        row = [cell(summary.get(s, {}).get(fig.key), fig.digits) for s in systems]
        if any(c != "-" for c in row):
            lines.append(f"| {fig.label} | " + " | ".join(row) + " |")
    return lines


def ratio_table(summary: dict, peers: list[str]) -> list[str]:
    lines = [
        "| figure | " + " | ".join(f"{OURS} vs {p}" for p in peers) + " |",
        "|---" * (len(peers) + 1) + "|",
    ]
    ours = summary.get(OURS, {})
    for fig in FIGURES:
        if fig.higher_is_better is None or fig.key not in ours:
            continue
        row = []
        for peer in peers:
            theirs = summary.get(peer, {}).get(fig.key)
            r = ratio(ours[fig.key][0], theirs[0], fig.higher_is_better) if theirs else None
            row.append("-" if r is None else f"{r:.2f}x")
        lines.append(f"| {fig.label} | " + " | ".join(row) + " |")
    return lines


def notes(records: list[dict], systems: list[str]) -> list[str]:
    """What a reader must know to read the figures: modes, reuse, errors, agreement."""
    lines = []
    for system in systems:
        mine = [r for r in records if r["system"] == system]
        for r in mine:
            if r["workload"] == "error":
                lines.append(f"- {system}, round {r['round']}: ERROR {r['error']}")
        modes = sorted({r["mode"] for r in mine if r["workload"] == "W3" and r.get("mode")})
        if modes:
            lines.append(f"- {system} W3: {'; '.join(modes)}")
        cached = [
            r["cached_tokens"] for r in mine if r["workload"] in ("W1", "W2") and r.get("cached_tokens")
        ]
        if cached:
            lines.append(f"- {system}: W1/W2 reused up to {max(cached)} cached prompt tokens (prefix cache)")
        w4 = [r for r in mine if r["workload"] == "W4"]
        if w4:
            last = w4[-1]
            lines.append(
                f"- {system} W4: turn-5 prompt {last['prompt_tokens_turn5']} tokens, "
                f"{last['prefilled_turn5']} prefilled"
            )
    lines += agreement(records, systems)
    return lines


def agreement(records: list[dict], systems: list[str]) -> list[str]:
    """Greedy W1 outputs compared with llama-cpp-python's (which runs the GGUF's weights unchanged)."""
    first = {}
    for r in records:
        if r["workload"] == "W1" and r.get("tokens") and r["system"] not in first:
            first[r["system"]] = r["tokens"]
    base = first.get("llama-cpp-python")
    if base is None:
        return []
    out = []
    for system in systems:
        if system == "llama-cpp-python" or system not in first:
            continue
        same = common_prefix(base, first[system])
        out.append(f"- {system} W1 output: first {same} of {len(base)} tokens equal llama-cpp-python's")
    return out


def markdown(meta: dict, records: list[dict]) -> str:
    systems = meta["systems_run"]
    summary = summarize(records, systems)
    peers = [s for s in systems if s != OURS]
    lines = [f"# Benchmark run {meta['run_id']}", ""]
    lines += [f"- {k}: {v}" for k, v in header_items(meta, records)]
    lines += ["", "## Figures (median, min-max over rounds)", ""] + figures_table(summary, systems)
    if OURS in summary and peers:
        lines += ["", f"## {OURS} relative to each peer (>1 = {OURS} better)", ""] + ratio_table(
            summary, peers
        )
    extra = notes(records, systems)
    if meta.get("skipped"):
        extra = [f"- skipped {name}: {why}" for name, why in meta["skipped"].items()] + extra
    if extra:
        lines += ["", "## Notes", ""] + extra
    return "\n".join(lines) + "\n"


def header_items(meta: dict, records: list[dict]) -> list[tuple[str, str]]:
    items = [
        ("commit", meta["commit"]),
        ("date", meta["date"]),
        (
            "CPU",
            f"{meta['cpu']['model']} ({meta['cpu']['logical_cpus']} logical CPUs; {meta['cpu']['flags']})",
        ),
        ("threads per system", str(meta["threads"])),
        ("idle threads busy-wait (--spin)", meta.get("spin", "default")),
        ("rounds x repeats", f"{meta['rounds']} x {meta['repeats']} (warm-up {meta['warmup']} per process)"),
        ("prompt tokens", json.dumps(meta["prompt_tokens"])),
        ("python / OS", f"{meta['python']} / {meta['platform']}"),
        ("load average (1/5/15 min) at start / end", f"{loadavg(meta, 'start')} / {loadavg(meta, 'end')}"),
    ]
    if meta.get("read_probe"):
        items.append(
            ("memory read rate after each round (quant/read_probe.py)", read_rates(meta["read_probe"]))
        )
    seen = set()
    for r in records:
        if r["workload"] == "process" and r["system"] not in seen:
            seen.add(r["system"])
            items.append((f"{r['system']} versions", json.dumps(r["versions"])))
    return items


def read_rates(probes: list[dict]) -> str:
    """The rounds' read-probe figures: what the decode GB/s of the same minutes stand beside."""
    best = [p["best_gbs"] for p in probes]
    return f"best {max(best):.1f} GB/s, rounds' best {' '.join(f'{b:.1f}' for b in best)} ({probes[0]['threads']} threads)"


def loadavg(meta: dict, when: str) -> str:
    values = meta.get(f"load_average_{when}")
    return "-" if not values else " ".join(f"{v:.1f}" for v in values)


def main() -> int:
    run_dir = Path(sys.argv[1])
    meta = json.loads((run_dir / "meta.json").read_text())
    print(markdown(meta, load_records(run_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
