"""A SQLite conversation store's images: the tables of schema 2 and how an image's row is kept
(``sqlite_kept_media`` links them to conversations; ``stored_media`` is the row's form).
"""

from __future__ import annotations

from clika_runtime.sessions.stores.sqlite_kept_media import KeptMedia
from clika_runtime.sessions.stores.stored_media import pixels_from_record, pixels_record

# The tables of schema 2: the pixels, and which conversation uses which image.
MEDIA_TABLES = (
    "CREATE TABLE media ("
    " sha256 TEXT PRIMARY KEY,"
    " height INTEGER NOT NULL,"
    " width INTEGER NOT NULL,"
    " pixels BLOB NOT NULL,"
    " created_at REAL NOT NULL)",
    "CREATE TABLE conversation_media ("
    " conversation_id TEXT NOT NULL,"
    " sha256 TEXT NOT NULL,"
    " PRIMARY KEY (conversation_id, sha256)) WITHOUT ROWID",
    "CREATE INDEX conversation_media_by_image ON conversation_media (sha256)",
)

# A damaged row raises StoredImageError naming it.
IMAGES = KeptMedia(
    table="media",
    links="conversation_media",
    columns=("height", "width", "pixels"),
    noun="image",
    payload="pixels",
    to_record=pixels_record,
    from_record=pixels_from_record,
)
