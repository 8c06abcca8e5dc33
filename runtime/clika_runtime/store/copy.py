"""Another name for a pulled model (``ollama cp``): a name record of the same source, no bytes copied.

The copy lists, loads and is removed like the original; removing one of
two names of a source removes that name alone, its exports stay for the other.
"""

from __future__ import annotations

from clika_runtime.store.exports import cached_exports
from clika_runtime.store.local_model import ModelError
from clika_runtime.store.names import NameRecord, read_record, write_record


def copy_name(source: str, destination: str) -> NameRecord:
    """Record ``destination`` as a name of what ``source`` names (ModelError: unknown, or taken)."""
    if not destination or "/" in destination or destination.startswith("."):
        raise ModelError(f"{destination!r} cannot name a model: give a plain name such as 'my-model'")
    held = {export.name: export.source_sha256 for export in cached_exports()}
    if source not in held:
        raise ModelError(f"{source} is not in the cache (see `clika list`)")
    if destination in held or read_record(destination) is not None:
        raise ModelError(f"{destination} already names a model; remove it first or choose another name")
    if read_record(source) is None:  # named by the catalog or its file alone: record it, so each name counts
        write_record(NameRecord(source, held[source]))
    record = NameRecord(destination, held[source])
    write_record(record)
    return record
