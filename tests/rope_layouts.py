"""A model folder rewritten into the layout of exports that stored their rope tables.

Exports before the tables were computed at load wrote each cos/sin table once
into the weights file (page-aligned, as every weight) and every graph of the
folder referred to it; their manifest had no ``rope_tables`` and said format
version 1. ``stored_tables_folder`` turns a folder that computes its tables
into exactly that, with the tables the runtime would compute.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from clika_runtime.contract.manifest import FORMAT_VERSION, Manifest
from clika_runtime.contract.rope_tables import computed_initializers

_ALIGNMENT = 4096


def stored_tables_folder(folder: Path, target: Path) -> Path:
    """A copy of ``folder`` whose graphs store the tables its manifest computes, as older exports did."""
    shutil.copytree(folder, target)
    manifest = Manifest.read(target)
    tables = computed_initializers(manifest.rope_tables)
    data_name = manifest.graphs["continuous"].file + ".data"
    places = _append(target / data_name, tables)
    for graph in sorted(target.glob("*.onnx")):
        model = onnx.load(str(graph), load_external_data=False)
        for init in model.graph.initializer:
            if init.name in tables:
                _point_at(init, tables[init.name], data_name, places[init.name])
        onnx.save(model, str(graph))
    dataclasses.replace(manifest, rope_tables=(), format_version=FORMAT_VERSION).write(target)
    return target


def _append(data: Path, tables: dict[str, np.ndarray]) -> dict[str, int]:
    """Append every table to the weights file at an aligned offset; returns the offsets."""
    offsets = {}
    with open(data, "ab") as out:
        for name, table in tables.items():
            offset = out.tell()
            pad = -offset % _ALIGNMENT
            out.write(b"\0" * pad)
            offsets[name] = offset + pad
            out.write(np.ascontiguousarray(table).tobytes())
    return offsets


def _point_at(init: TensorProto, table: np.ndarray, data_name: str, offset: int) -> None:
    name = init.name
    init.Clear()  # the placeholder's empty inline data goes
    init.name = name
    init.data_type = TensorProto.FLOAT
    init.dims.extend(table.shape)
    init.data_location = TensorProto.EXTERNAL
    for key, value in (("location", data_name), ("offset", offset), ("length", table.nbytes)):
        entry = init.external_data.add()
        entry.key, entry.value = key, str(value)
