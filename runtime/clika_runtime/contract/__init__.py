"""The export-runtime contract: what a model folder holds (``manifest``, opened by
``model_folder``) and how its graphs are shaped (``step_graph``, ``paged_step_graph``,
``past_kv_graph``, the rotary tables of ``rope`` and ``rope_tables``).

The exporter writes folders by these modules and the runtime reads them by the same ones.
"""
