"""The manifest's ``rope_tables`` is untrusted: every bad or oversized field is refused by name when the
folder opens, the bounds when the manifest is read, the scaling from its frequencies before any table
is allocated."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from clika_runtime.contract.manifest import Manifest, ManifestError
from clika_runtime.contract.model_folder import open_model_folder
from clika_runtime.contract.rope_tables import MAX_POSITIONS, MAX_TABLE_BYTES


def _folder_with(tiny_llama_model: Path, tmp_path: Path, change: Callable[[dict], None]) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny_llama_model, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _table(**changes) -> Callable[[dict], None]:
    def change(manifest: dict) -> None:
        manifest["rope_tables"][0].update(changes)

    return change


def _scaling(scaling) -> Callable[[dict], None]:
    return _table(scaling=scaling)


def _without(key: str) -> Callable[[dict], None]:
    return lambda manifest: manifest["rope_tables"][0].pop(key)


def _field(value) -> Callable[[dict], None]:
    return lambda manifest: manifest.update(rope_tables=value)


LONGROPE = {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 64}

BAD = {
    "positions past the cap": (
        _table(positions=1 << 40),
        f"rope_tables[0].positions must be an integer from 1 to {MAX_POSITIONS}, got 1099511627776",
    ),
    "positions not the window": (
        _table(positions=64),
        "rope_tables[0].positions 64 is not the context_window 128",
    ),
    "positions a string": (_table(positions="128"), "rope_tables[0].positions must be an integer"),
    "positions a boolean": (_table(positions=True), "rope_tables[0].positions must be an integer"),
    "rotary dims past the head": (
        _table(rotary_dim=32),
        "rope_tables[0].rotary_dim must be an integer from 2 to 16",
    ),
    "odd rotary dims": (_table(rotary_dim=15), "rope_tables[0].rotary_dim must be even, got 15"),
    "theta a string": (
        _table(theta="1e4"),
        "rope_tables[0].theta must be a finite number above 1, got '1e4'",
    ),
    "theta not a number": (
        _table(theta=float("nan")),
        "rope_tables[0].theta must be a finite number above 1",
    ),
    "theta below 1": (_table(theta=0.5), "rope_tables[0].theta must be a finite number above 1, got 0.5"),
    "unknown rope type": (
        _scaling({"rope_type": "mrope"}),
        "rope_tables[0].scaling: rope scaling type 'mrope' is not supported",
    ),
    "scaling missing its factors": (
        _scaling(LONGROPE),
        "rope_tables[0].scaling: rope scaling 'longrope' is missing or has a bad 'long_factor'",
    ),
    "a factor of zero": (
        _scaling({"rope_type": "linear", "factor": 0}),
        "rope_tables[0].scaling: rope scaling 'linear' with theta 10000.0 gives non-finite",
    ),
    "a factor list longer than the frequencies": (
        _scaling({**LONGROPE, "short_factor": [1.0] * 100_000, "long_factor": [1.0] * 8}),
        "rope_tables[0].scaling.short_factor must be a list of at most 8 numbers",
    ),
    "a nested scaling value": (
        _scaling({"rope_type": "linear", "factor": {"a": 1}}),
        "rope_tables[0].scaling.factor must be a number, a string, a boolean or a list of numbers",
    ),
    "scaling not an object": (_scaling([1, 2]), "rope_tables[0].scaling must be null or an object"),
    "another dtype": (_table(dtype="float16"), "rope_tables[0].dtype must be one of float32, got 'float16'"),
    "an unknown field": (_table(interleaved=True), "rope_tables[0] has unknown fields ['interleaved']"),
    "a missing field": (_without("sin"), "rope_tables[0] is missing the field 'sin'"),
    "an empty name": (
        _table(cos=""),
        "rope_tables[0].cos must be an initializer name of 1 to 256 characters",
    ),
    "one name twice": (_table(sin="model.rotary.cos_cache"), "rope_tables names an initializer twice"),
    "not a list": (_field({"cos": "x"}), "rope_tables must be a list of at most 4 tables"),
    "too many tables": (_field([{}] * 5), "rope_tables must be a list of at most 4 tables"),
    "an entry not an object": (_field(["x"]), "rope_tables[0] must be an object, got 'x'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_field_is_refused_by_name(tiny_llama_model: Path, tmp_path: Path, case: str) -> None:
    change, message = BAD[case]
    folder = _folder_with(tiny_llama_model, tmp_path, change)
    with pytest.raises(ManifestError) as error:
        open_model_folder(folder, threads=1)
    assert str(error.value).startswith("manifest ") and message in str(error.value)


def test_tables_too_large_together_are_refused_before_anything_is_allocated(
    tiny_llama_model: Path, tmp_path: Path
) -> None:
    """Four tables of the most positions and 512 rotary dims each pass every per-field bound, and
    would take 8 GiB; the manifest is refused without allocating them."""

    def huge(manifest: dict) -> None:
        manifest["context_window"] = MAX_POSITIONS
        manifest["architecture"]["head_dim"] = 512
        entry = {"positions": MAX_POSITIONS, "rotary_dim": 512, "theta": 10000.0, "scaling": None}
        manifest["rope_tables"] = [{"cos": f"c{i}", "sin": f"s{i}", **entry} for i in range(4)]

    folder = _folder_with(tiny_llama_model, tmp_path, huge)
    tracemalloc.start()
    try:
        with pytest.raises(ManifestError, match=f"more than the {MAX_TABLE_BYTES} allowed"):
            Manifest.read(folder)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_a_format_version_past_the_computed_tables_is_refused(tiny_llama_model: Path, tmp_path: Path) -> None:
    folder = _folder_with(tiny_llama_model, tmp_path, lambda m: m.update(format_version=3))
    with pytest.raises(
        ManifestError, match=r"format_version 3 is not supported \(this runtime reads versions 1, 2\)"
    ):
        Manifest.read(folder)


def test_a_table_field_round_trips(tiny_llama_model: Path, tmp_path: Path) -> None:
    manifest = Manifest.read(tiny_llama_model)
    (table,) = manifest.rope_tables
    manifest.write(tmp_path)
    assert json.loads((tmp_path / "manifest.json").read_text())["rope_tables"] == [
        {
            "cos": "model.rotary.cos_cache",
            "sin": "model.rotary.sin_cache",
            "positions": 128,
            "rotary_dim": 16,
            "theta": table.theta,
            "scaling": None,
            "dtype": "float32",
        }
    ]
    assert Manifest.from_dict(json.loads(manifest.to_json())) == manifest
