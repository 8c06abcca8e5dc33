"""Media inputs: images, video frames, audio clips and their preprocessing for media towers.

One concept per module: ``arguments`` checks what a caller passed,
``resample`` resizes 8-bit images as Pillow does, ``pixels`` rescales and
normalizes, ``idefics3`` and ``qwen2_vl`` are the checkpoint processors,
``video`` samples frames, ``processor_config`` reads a checkpoint's
``preprocessor_config.json`` into the right processor; ``families`` holds one
module per vision or audio family (``vision_family`` / ``audio_family`` are
what each provides), which the towers and prompt builders ask;
``audio_features``, ``audio_tower`` and ``audio_prompts`` do for audio clips
what the vision modules do for images (``media_prompts`` is what both prompt
builders share), ``wav`` reads WAV bytes.
"""
