"""Vision towers and their projectors exported as their own ONNX graph.

``vision_export`` reads a Hugging Face multimodal folder and writes
``vision.onnx`` (with its weights file) beside the text graphs;
``idefics3_vision``, ``qwen2_vl_vision`` and ``qwen2_5_vl_vision`` (Qwen2-VL's
with window attention) build each family's graph with the shared pieces in
``vision_ops``.
"""
