"""The whole deployment's /health and /metrics, made of every replica's own.

Each replica's Prometheus text is parsed and written again with a ``replica`` label on
every sample, so one scrape of the front shows every engine side by side (sum them in
the query: ``sum(clika_requests_running)``); HELP and TYPE lines appear once per family.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def merged_health(model_id: str, loads: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """``ok`` when every replica answered; each replica's load and their sums."""
    answered = {name: load for name, load in loads.items() if load is not None}
    status = "ok" if answered and len(answered) == len(loads) else "degraded" if answered else "down"
    return {
        "status": status,
        "model": model_id,
        "replicas": {name: _load_fields(load) for name, load in loads.items()},
        "active": sum(int(load.get("active", 0)) for load in answered.values()),
        "waiting": sum(int(load.get("waiting", 0)) for load in answered.values()),
    }


def merged_metrics(texts: Mapping[str, str]) -> str:
    """The replicas' exposition texts as one, each sample labelled with its replica's name."""
    families: dict[str, tuple[str, str, list[str]]] = {}
    for name, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            _, _, lines = families.setdefault(family.name, (family.type, family.documentation, []))
            for sample in family.samples:
                labels = {**sample.labels, "replica": name}
                lines.append(f"{sample.name}{{{_labels(labels)}}} {_value(sample.value)}")
    out: list[str] = []
    for family_name, (kind, documentation, lines) in families.items():
        if kind == "counter":  # named as prometheus_client's own text names it
            family_name += "_total"
        out.append(f"# HELP {family_name} {_escape_help(documentation)}")
        out.append(f"# TYPE {family_name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n"


def _load_fields(load: Mapping[str, Any] | None) -> dict[str, Any]:
    if load is None:
        return {"status": "unreachable"}
    return {"status": "ok", **{k: v for k, v in load.items() if k != "replica"}}


def _labels(labels: Mapping[str, str]) -> str:
    return ",".join(f'{key}="{_escape_label(value)}"' for key, value in labels.items())


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float) -> str:
    return repr(float(value)) if value == value else "NaN"
