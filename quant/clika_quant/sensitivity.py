"""Which layer weights may compute with int8 activations, chosen by the error each adds.

MatMulNBits at accuracy level 4 quantizes each row of activations to int8 in
blocks of 32 (llama.cpp's Q8 does the same) and is the fast decode kernel; at
level 0 it multiplies the exact weights in fp32. The error level 4 adds is
small per matrix but it compounds: on SmolLM2-135M the all-level-4 model
turns "The capital of France is Paris." into "L'Étoile, la Marsebeau, ...",
because the float model's first token is a 0.08-nat choice between "The" and
"L" and the int8 noise moves it by 0.3 nats.

The pass measures, on the fixed calibration conversation run through the
model's own graph, the KL divergence each place adds when it alone computes at
level 4 while every other 4-bit weight computes at level 0 (the float
computation of the same exact weights). Places are (role, layer) pairs; to keep
the number of graphs small it measures each layer (all its 4-bit roles) and
each role (in every layer). Those measured groups are what it moves: starting
from every place at level 4, it moves whole layers and whole roles to level 0,
the most measured KL per weight byte first, skipping a group whose bytes would
take the places at level 0 past ``budget`` of all 4-bit bytes, until the
estimated KL left is at most ``target_kl``, then measures the choice and, while that measured
KL is over the target, moves the next groups in the same order one at a time (the estimate
can fall short: SmolLM2-135M's estimate 0.00037 left measured 0.00041, and that default lost
one of fp32's answers). Level 0 costs decode time in
proportion to the bytes it multiplies (at one token a step, 2.3-2.9x the
level-4 kernel, 63-67 us more per MB of 4-bit weights for every role of
SmolLM2-135M on 2 threads), so the budget is a speed budget; the default's is 1 (the target
decides: ``clika_quant.options``). A pair's own KL is
only estimated (``KL(layer) x share(role)``, ``share`` being the role's part of
the per-role sum, scaled so that all pairs add up to the KL measured with every
place at level 4; KL does not add up) and is used for the KL left alone: on
SmolLM2 the pairs chosen by that estimate lost 2-3 of the fp32 model's answers
with 25-50% of the bytes at level 0, the measured groups (all query/key/value
matrices and the last layer, 18% of the bytes) none. The measurements, the
choice and its estimated and measured remaining error go into the manifest's
precision record.

The candidates are the 4-bit layer weights at level 4 and every GGUF layer matrix that
``GgufMatMul`` computes at level 4 whatever its width (Q5_0, Q6_K, Q8_0, ...): the op's fp32
path costs those 1.5-2.1x its int8 one at one row (kernels/README.md), where an 8-bit
MatMulNBits at level 0 costs 10-30x, so 8-bit MatMulNBits weights stay at level 4. On
gemma-3-270m's Q4_K_M, 46 of its 73 layer matrices are such wider blocks; with them left at
level 4 the pass could not reach its target (0.00087 left) and the default lost one of the
fp32 twin's answers.

When all places at level 4 add no more than ``target_kl``, only that is measured
and nothing moves. The same graph, text and threads give the same KL figures (ORT's kernels are
deterministic per element), so the choice is reproducible.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from clika_quant.quality import SequenceRunner
from clika_quant.quantize import summarize, with_level
from clika_runtime.kernels.gguf_matmul import B_SUFFIX, GGML_TYPE_NAMES, LEVEL_PRECISIONS, OP_TYPE
from clika_runtime.kernels.op import fp32_form_of_type

FAST, EXACT = 4, 0
PROBE_FILE = "sensitivity_probe.onnx"
CALIBRATION_TOKENS = 128


@dataclass(frozen=True)
class Place:
    """One (role, layer) of candidate weights, the nodes that compute it and which of its
    matrix's record groups they are."""

    role: str
    layer: int
    nodes: tuple[str, ...]
    bytes: int
    groups: tuple[int, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.role}@{self.layer}"


def places_of(model: onnx.ModelProto, record: dict[str, Any], *, only_fast: bool = True) -> list[Place]:
    """The candidate layer weights of a quantized graph, by (role, layer), from the precision
    record: 4-bit ones and GgufMatMul ones of any width (``only_fast``: those the record has at
    level 4, the candidates of the pass)."""
    by_weight: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        if node.op_type == "MatMulNBits" and _attr(node, "bits") == 4:
            by_weight.setdefault(node.input[1], []).append(node)
        elif node.op_type == OP_TYPE:
            # GgufMatMul's B is ``base.gguf``: keyed as the MatMulNBits form's ``base.qweight``
            base = node.input[1][: -len(B_SUFFIX)]
            by_weight.setdefault(f"{base}.qweight", []).append(node)
    places = []
    for name, entry in record.get("matrices", {}).items():
        if entry.get("layer") is None or not entry.get("groups"):
            continue
        base = name[: -len(".weight")] if name.endswith(".weight") else name
        groups = entry["groups"]
        nodes, size, picked = [], 0, []
        for i, group in enumerate(groups):
            if only_fast and group.get("accuracy_level") != FAST:
                continue  # level 0 stays
            suffix = "" if len(groups) == 1 else f".part{i}"
            found = [n for n in by_weight.get(f"{base}{suffix}.qweight", []) if _candidate(n, group)]
            if found:
                nodes += [n.name for n in found]
                size += group["bytes"]
                picked.append(i)
        if nodes:
            places.append(Place(entry["roles"][0], int(entry["layer"]), tuple(nodes), size, tuple(picked)))
    return sorted(places, key=lambda p: (p.layer, p.role))


def _candidate(node: onnx.NodeProto, group: dict[str, Any]) -> bool:
    """Whether a node may move to level 0: 4-bit weights, or GGUF blocks of any width that the
    kernels compute (an 8-bit MatMulNBits at level 0 is 10-30x slower: it stays at level 4)."""
    return node.op_type == OP_TYPE or group["bits"] == 4


def set_levels(model: onnx.ModelProto, levels: dict[str, int], fp32_form: str = "fma") -> onnx.ModelProto:
    """A copy of ``model`` with the named MatMulNBits nodes at the given accuracy levels; the
    GgufMatMul nodes of the formats ``fp32_form`` changes get it at level 0 (``op``)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.name in levels:
            for attr in node.attribute:
                if attr.name == "accuracy_level":
                    attr.CopyFrom(helper.make_attribute("accuracy_level", levels[node.name]))
                elif attr.name == "precision" and node.op_type == OP_TYPE:
                    attr.CopyFrom(helper.make_attribute("precision", LEVEL_PRECISIONS[levels[node.name]]))
            if node.op_type == OP_TYPE:
                _set_fp32_form(node, fp32_form if levels[node.name] == EXACT else "fma")
    return copy


def _set_fp32_form(node: onnx.NodeProto, form: str) -> None:
    kept = [a for a in node.attribute if a.name != "fp32_form"]
    del node.attribute[:]
    node.attribute.extend(kept)
    form = fp32_form_of_type(GGML_TYPE_NAMES.get(_attr(node, "ggml_type")), form)
    if form != "fma":
        node.attribute.append(helper.make_attribute("fp32_form", form))


def fp32_form_of(group: dict[str, Any], form: str) -> dict[str, Any]:
    """A group record at level 0 with the fp32 form its node runs (none recorded for fp32 FMA)."""
    changed = {k: v for k, v in group.items() if k != "fp32_form"}
    form = fp32_form_of_type(group.get("weight_format", "").removeprefix("gguf "), form)
    if form != "fma":
        changed["fp32_form"] = form
    return changed


@dataclass
class Probe:
    """Runs the calibration tokens through variants of one folder's graph."""

    runner: SequenceRunner
    model: onnx.ModelProto
    folder: Path
    tokens: list[int]
    threads: int | None
    on_run: Callable[[], None] | None = None  # told after each variant ran (a progress bar)
    fp32_form: str = "fma"  # what the nodes at level 0 run

    def logits(self, levels: dict[str, int], fp32_form: str | None = None) -> np.ndarray:
        return self.logits_of(set_levels(self.model, levels, fp32_form or self.fp32_form))

    def logits_of(self, model: onnx.ModelProto) -> np.ndarray:
        """The calibration logits of a variant of the folder's graph (its weights in the folder)."""
        from clika_runtime.contract.model_folder import open_session, session_options

        path = self.folder / PROBE_FILE
        onnx.save(model, str(path))
        try:
            options = session_options(self.threads, allow_spinning=False)
            session = open_session(path, options, self.runner.model.manifest.rope_tables)
        finally:
            os.unlink(path)  # the session holds what it needs; the folder keeps no probe
        runner = SequenceRunner(dataclasses.replace(self.runner.model, session=session), self.runner.capacity)
        logits = runner.step(self.tokens, all_logits=True).astype(np.float64)
        if self.on_run is not None:
            self.on_run()
        return logits


def mean_kl(reference: np.ndarray, candidate: np.ndarray) -> float:
    ref, got = _log_softmax(reference), _log_softmax(candidate)
    return float((np.exp(ref) * (ref - got)).sum(-1).mean())


def _log_softmax(x: np.ndarray) -> np.ndarray:
    top = x.max(-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(-1, keepdims=True))


def probe_count(places: Sequence[Place]) -> int:
    """The most graph variants the pass runs: the exact reference, all places fast, each layer
    and each role fast alone, and the final check of the choice (exact and as chosen)."""
    return 4 + len({p.layer for p in places}) + len({p.role for p in places})


def measure(probe: Probe, places: Sequence[Place], target_kl: float) -> dict[str, Any]:
    """KL added by all places at level 4 and, when that is over ``target_kl``, by each layer and
    each role at level 4 alone."""
    exact = {n: EXACT for p in places for n in p.nodes}
    reference = probe.logits(exact)

    def kl_with_fast(chosen: Sequence[Place]) -> float:
        return mean_kl(reference, probe.logits({**exact, **{n: FAST for p in chosen for n in p.nodes}}))

    measured: dict[str, Any] = {"all_fast_kl": kl_with_fast(places)}
    if measured["all_fast_kl"] <= target_kl:
        return measured  # every place may stay at level 4: nothing to rank
    layers = sorted({p.layer for p in places})
    roles = sorted({p.role for p in places})
    measured["layer_kl"] = {str(n): kl_with_fast([p for p in places if p.layer == n]) for n in layers}
    measured["role_kl"] = {role: kl_with_fast([p for p in places if p.role == role]) for role in roles}
    return measured


def estimate(places: Sequence[Place], measured: dict[str, Any]) -> dict[str, float]:
    """KL of each (role, layer) at level 4: its layer's KL split by the roles' shares, scaled so
    that the places add up to the KL measured with all of them at level 4 (KL is not additive:
    on SmolLM2 the layers' own figures add up to 1.7x the whole, on Qwen2.5-0.5B to 3x)."""
    if "role_kl" not in measured:
        return {p.key: measured["all_fast_kl"] / len(places) for p in places}
    role_kl = measured["role_kl"]
    total = sum(role_kl.values())
    layer_roles: dict[int, set[str]] = {}
    for place in places:
        layer_roles.setdefault(place.layer, set()).add(place.role)
    estimated = {}
    for place in places:
        present = sum(role_kl[r] for r in layer_roles[place.layer]) or total or 1.0
        share = role_kl[place.role] / present if present else 1.0 / len(layer_roles[place.layer])
        estimated[place.key] = measured["layer_kl"][str(place.layer)] * share
    added = sum(estimated.values())
    scale = measured["all_fast_kl"] / added if added > 0 else 0.0
    return {key: value * scale for key, value in estimated.items()}


@dataclass(frozen=True)
class Group:
    """A measured group of places: one layer (all its roles) or one role (in every layer)."""

    name: str
    places: tuple[Place, ...]
    kl: float

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.places)


def groups_of(places: Sequence[Place], measured: dict[str, Any]) -> list[Group]:
    """The layers and roles the pass measured, with the KL each adds at level 4 alone."""
    if "role_kl" not in measured:
        return []
    layers = [
        Group(f"@{n}", tuple(p for p in places if p.layer == int(n)), kl)
        for n, kl in measured["layer_kl"].items()
    ]
    roles = [Group(r, tuple(p for p in places if p.role == r), kl) for r, kl in measured["role_kl"].items()]
    return [g for g in layers + roles if g.places]


def choose(
    places: Sequence[Place],
    groups: Sequence[Group],
    estimated: dict[str, float],
    target_kl: float,
    budget: float,
) -> list[Place]:
    """The places to compute at level 0: whole groups, the most measured KL per byte first, each
    one only if its places not yet chosen fit in the budget, until the estimated KL left is at
    most ``target_kl``."""
    total_bytes = sum(p.bytes for p in places)
    remaining = sum(estimated.values())
    chosen: dict[str, Place] = {}
    spent = 0
    for group in ranked(groups):
        if remaining <= target_kl:
            break
        new = [p for p in group.places if p.key not in chosen]
        cost = sum(p.bytes for p in new)
        if not new or spent + cost > budget * total_bytes:
            continue
        for place in new:
            chosen[place.key] = place
            remaining -= estimated[place.key]
        spent += cost
    return sorted(chosen.values(), key=lambda p: (p.layer, p.role))


def ranked(groups: Sequence[Group]) -> list[Group]:
    """The groups in the order they move to level 0: the most measured KL per byte first."""
    return sorted(groups, key=lambda g: (-g.kl / max(g.bytes, 1), g.name))


def until_measured_target(
    places: Sequence[Place],
    groups: Sequence[Group],
    chosen: Sequence[Place],
    target_kl: float,
    budget: float,
    kl_left: Callable[[Sequence[Place]], float],
) -> tuple[list[Place], float, int]:
    """``chosen`` and, while the KL measured with it (``kl_left``) is over ``target_kl``, the next
    groups in ``ranked`` order that fit the budget, one at a time: the estimate can fall short
    (KL does not add up). Returns the places, their measured KL and how many groups were added."""
    total_bytes = sum(p.bytes for p in places)
    current = {p.key: p for p in chosen}
    kl, added = kl_left(list(current.values())), 0
    for group in ranked(groups):
        if kl <= target_kl:
            break
        new = [p for p in group.places if p.key not in current]
        spent = sum(p.bytes for p in current.values())
        if not new or spent + sum(p.bytes for p in new) > budget * total_bytes:
            continue
        current.update((p.key, p) for p in new)
        kl, added = kl_left(list(current.values())), added + 1
    return sorted(current.values(), key=lambda p: (p.layer, p.role)), kl, added


def _attr(node: onnx.NodeProto, name: str) -> Any:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)


def choose_levels(
    folder: str | Path,
    record: dict[str, Any],
    tokens: Sequence[int],
    *,
    target_kl: float,
    budget: float,
    fp32_form: str = "fma",
    threads: int | None = None,
    on_probe: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Measure, choose and apply: the folder's graph gets the chosen levels; returns the new record.
    The matrices kept at level 0 run ``fp32_form``; the KL is measured against fp32 FMA throughout.

    ``on_probe(total=N)`` is told after each graph variant ran, with how many the pass runs at most."""
    from clika_runtime.contract.model_folder import open_model_folder

    folder = Path(folder)
    opened = open_model_folder(folder, threads=threads, allow_spinning=False)
    graph_path = folder / opened.graph.file
    model = onnx.load(str(graph_path), load_external_data=False)
    places = places_of(model, record)
    if not places:
        return record
    runner = SequenceRunner(opened, min(len(tokens) + 8, opened.manifest.context_window))
    most = probe_count(places)
    told = (lambda: on_probe(total=most)) if on_probe is not None else None
    probe = Probe(runner, model, folder, list(tokens)[: runner.capacity - 8], threads, told, fp32_form)
    measured = measure(probe, places, target_kl)
    estimated = estimate(places, measured)
    groups = groups_of(places, measured)
    chosen = choose(places, groups, estimated, target_kl, budget)
    reference: list[np.ndarray] = []
    checks = 0

    def kl_left(exact_places: Sequence[Place]) -> float:
        nonlocal most, checks
        checks += 1
        most += checks > 1  # each check past the first is one more graph run than planned
        if not reference:
            reference.append(probe.logits({n: EXACT for p in places for n in p.nodes}, fp32_form="fma"))
        return mean_kl(reference[0], probe.logits(_levels(places, {p.key for p in exact_places})))

    chosen, final_kl, added = until_measured_target(places, groups, chosen, target_kl, budget, kl_left)
    exact = {p.key for p in chosen}
    levels = _levels(places, exact)
    final = set_levels(model, levels, fp32_form)
    onnx.save(final, str(graph_path))
    record = _recorded(
        record, places, measured, estimated, exact, target_kl, budget, probe, final_kl, fp32_form
    )
    record["sensitivity"]["groups_added_by_measurement"] = added
    return record


def _levels(places: Sequence[Place], exact: set[str]) -> dict[str, int]:
    return {n: (EXACT if p.key in exact else FAST) for p in places for n in p.nodes}


def _recorded(
    record, places, measured, estimated, exact, target_kl, budget, probe, final_kl, fp32_form
) -> dict[str, Any]:
    total = sum(p.bytes for p in places)
    record = dict(record)
    matrices = {name: dict(entry) for name, entry in record["matrices"].items()}
    keyed = {p.key: p for p in places}
    for entry in matrices.values():
        if entry.get("layer") is None or not entry.get("groups"):
            continue
        place = keyed.get(f"{entry['roles'][0]}@{entry['layer']}")
        if place is not None:
            level = EXACT if place.key in exact else FAST
            form = fp32_form if level == EXACT else "fma"
            entry["groups"] = [
                fp32_form_of(with_level(g, level), form) if i in place.groups else g
                for i, g in enumerate(entry["groups"])
            ]
    record["matrices"] = matrices
    record = summarize(record)
    record["scheme"] = (
        f"{record['scheme']}; measured: {len(exact)} of {len(places)} layer matrices computed in fp32 "
        f"(level 0), {len(places) - len(exact)} with int8 activations (level 4)"
    )
    record["sensitivity"] = {
        "method": "KL added on the calibration conversation by each layer and each role at level 4 alone; "
        "whole layers and roles moved to level 0, the most KL per byte first, within the budget",
        "calibration_tokens": len(probe.tokens),
        "target_kl": target_kl,
        "budget": budget,
        "measured": measured,
        "estimated_kl": {k: round(v, 7) for k, v in estimated.items()},
        "level0": sorted(exact, key=lambda k: (int(k.split("@")[1]), k)),
        "level0_bytes": sum(keyed[k].bytes for k in exact),
        "candidate_bytes": total,
        "estimated_kl_left": sum(v for k, v in estimated.items() if k not in exact),
        "measured_kl_left": final_kl,
    }
    return record
