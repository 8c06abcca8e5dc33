"""Other SDKs' shapes over the local runtime, one module per SDK, each a thin adapter over the
sessions and the tool loop (no engine of its own): code written for that SDK runs on a local
model by changing its import.

* :mod:`~clika_runtime.compat.chucky`: the Chucky client (prompt / stream / sessions, ``@tool``);
* :mod:`~clika_runtime.compat.foundry_local`: Foundry Local's Session (requests of items, streamed
  responses that cancel on drop, session options, an input queue prefilled as it fills).
"""
