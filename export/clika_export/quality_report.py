"""The export's quality steps that run the finished folder: accuracy levels chosen by measured
error (``clika_quant.sensitivity``) and answer accuracy (``clika_quant.answers``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clika_export.graph.kv_int8 import calibration_ids
from clika_runtime.contract.manifest import Architecture


def parameter_count(arch: Architecture) -> int:
    """The weights of a decoder: its layers' matrices and the token table (twice when untied)."""
    q, kv = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    layer = arch.hidden_size * (2 * q + 2 * kv) + 3 * arch.hidden_size * arch.intermediate_size
    tables = arch.vocab_size * arch.hidden_size * (1 if arch.tie_word_embeddings else 2)
    return arch.num_layers * layer + tables


def sensitivity_planned(precision: str, quant_options: dict[str, Any] | None, arch: Architecture) -> bool:
    """Whether an export at ``precision`` will run the pass, known before it quantizes (so the
    export can number its stages from the start)."""
    if precision == "fp32":
        return False
    from clika_quant.options import QuantOptions

    options = QuantOptions.for_precision(precision, quant_options).to_dict()
    return wants_sensitivity({"options": options}, arch)


def wants_sensitivity(record: dict[str, Any], arch: Architecture) -> bool:
    """Whether the options ask for the pass and the model is small enough for it."""
    options = record.get("options", {})
    limit = options.get("sensitivity_max_parameters")
    return bool(options.get("sensitivity_budget")) and (limit is None or parameter_count(arch) <= limit)


def choose_levels_by_sensitivity(
    folder: Path, record: dict[str, Any], *, threads: int | None, on_probe: Any = None
) -> dict[str, Any]:
    """Rewrite the folder graph's accuracy levels as the sensitivity pass chooses; the new record."""
    from clika_quant import sensitivity

    options = record["options"]
    return sensitivity.choose_levels(
        folder,
        record,
        calibration_ids(folder)[: sensitivity.CALIBRATION_TOKENS],
        target_kl=options["sensitivity_target_kl"],
        budget=options["sensitivity_budget"],
        fp32_form=options["fp32_form"],
        threads=threads,
        on_probe=on_probe,
    )


def choose_bits_by_sensitivity(
    folder: Path, record: dict[str, Any], *, threads: int | None, on_probe: Any = None
) -> dict[str, Any]:
    """Requantize the 8-bit layer matrices the measured error allows (``requantize_target_kl``)."""
    from clika_quant import sensitivity, sensitivity_bits

    target = record.get("options", {}).get("requantize_target_kl")
    if target is None:
        return record
    tokens = calibration_ids(folder)[: sensitivity.CALIBRATION_TOKENS]
    return sensitivity_bits.choose_bits(
        folder, record, tokens, target_kl=target, threads=threads, on_probe=on_probe
    )


def measure_answers(folder: Path, count: int, *, threads: int | None) -> dict[str, Any]:
    """Answer accuracy of the folder on the first ``count`` questions of the catalog's set."""
    from clika_export.pull.fetch import fetch_data
    from clika_quant import answers, quality

    questions = answers.capital_questions(fetch_data(answers.DATA_ITEM, progress=False), count)
    return answers.answer_accuracy(quality.open_runner(folder, threads=threads), questions).as_dict()
