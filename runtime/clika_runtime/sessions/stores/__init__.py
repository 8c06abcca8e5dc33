"""Where conversations are kept: the store protocol and the in-memory store
(``conversation_store``), the SQLite store (``sqlite`` and its media tables), and the form
a transcript's images and audio take in a store (``stored_media``, ``stored_audio``).
"""
