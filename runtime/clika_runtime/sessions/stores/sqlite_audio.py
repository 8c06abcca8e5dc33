"""A SQLite conversation store's audio clips: the tables of schema 3 and how a clip's row is kept
(``sqlite_kept_media`` links them to conversations, as it does images; ``stored_audio`` is the
row's form).
"""

from __future__ import annotations

from clika_runtime.sessions.stores.sqlite_kept_media import KeptMedia
from clika_runtime.sessions.stores.stored_audio import samples_from_record, samples_record

# The tables of schema 3: the samples, and which conversation uses which clip.
AUDIO_TABLES = (
    "CREATE TABLE audio ("
    " sha256 TEXT PRIMARY KEY,"
    " samples INTEGER NOT NULL,"
    " data BLOB NOT NULL,"
    " created_at REAL NOT NULL)",
    "CREATE TABLE conversation_audio ("
    " conversation_id TEXT NOT NULL,"
    " sha256 TEXT NOT NULL,"
    " PRIMARY KEY (conversation_id, sha256)) WITHOUT ROWID",
    "CREATE INDEX conversation_audio_by_clip ON conversation_audio (sha256)",
)

# A damaged row raises StoredAudioError naming it.
AUDIO = KeptMedia(
    table="audio",
    links="conversation_audio",
    columns=("samples", "data"),
    noun="audio clip",
    payload="samples",
    to_record=samples_record,
    from_record=samples_from_record,
)
