"""The export pipeline: read -> build -> quantize -> verify -> write a model folder.

``export(source, out)`` turns a Hugging Face folder or a ``.gguf`` file into a
model folder (``model.onnx`` + ``model.onnx.data``, ``tokenizer.json``,
``chat_template.jinja``, ``manifest.json``); a GGUF text model with llama.cpp's
``mmproj`` file beside it (``mmproj=``) also gets the vision tower. Everything is written into a
temporary folder beside ``out`` and renamed into place at the end, so a failed
export leaves nothing half-written.

``cached_export`` keeps exports in ``$CLIKA_CACHE/exports/<key>``, the key
made of the source's (and mmproj's) sha256, the export options and the exporter's version.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.fallback.optimum_export import build_with_optimum, optimum_covers
from clika_export.fallback.optimum_run import TEXT_GENERATION_TYPES, OptimumExportError
from clika_export.fallback.past_kv_graph import PastKVGraphError
from clika_export.fallback.toolchain import ToolchainError
from clika_export.families import FAMILIES, family_for, supported
from clika_export.file_lock import held_lock
from clika_export.graph.decoder import BuiltGraph
from clika_export.graph.head_rescore import add_head_rescore_in_place
from clika_export.graph.hidden_states import add_hidden_states_in_place, ensure_hidden_states
from clika_export.graph.kv_int8 import KVQuantError, add_int8_kv_graph, ensure_int8_kv_graph
from clika_export.graph.paged_graph import add_paged_graph, ensure_paged_graph
from clika_export.graph.step_attention import add_step_attention_in_place
from clika_export.graph.swiglu import fuse_swiglu_in_place
from clika_export.manifest_parts import (
    TEMPLATE_FILE,
    provenance,
    tokenizer_spec,
    write_text_files,
)
from clika_export.media.mmproj_pair import attach_mmproj, check_pair
from clika_export.media.towers import attach_towers
from clika_export.media.vision_export import read_json
from clika_export.progress import Progress
from clika_export.quality_report import (
    choose_bits_by_sensitivity,
    choose_levels_by_sensitivity,
    measure_answers,
    sensitivity_planned,
    wants_sensitivity,
)
from clika_export.readers.hf import family_name, folder_sha256, is_hf_folder, model_type, read_config, read_hf
from clika_export.readers.multimodal import is_multimodal, refuse_unbuilt
from clika_export.readers.regular_file import file_sha256
from clika_export.template_check import check_chat_template
from clika_export.termination import terminated_as_exit
from clika_export.verify import CHECK_PLAN, FP32_TOLERANCE, StreamingReference, check_graph, check_sequences
from clika_runtime import __version__
from clika_runtime.contract.manifest import (
    BUILDERS,
    COMPUTED_TABLES_VERSION,
    FORMAT_VERSION,
    NATIVE_BUILDER,
    OPTIMUM_BUILDER,
    GraphSpec,
    KVSpec,
    Manifest,
    ManifestError,
)
from clika_runtime.contract.step_graph import LOGITS, PAST_KEY, PAST_VALUE, PRESENT_KEY, PRESENT_VALUE
from clika_runtime.kernels.block_sums import BLOCK_SUM_FORM
from clika_runtime.kernels.library import kernel_status

# Bumped whenever the graph a given checkpoint exports to changes, so cached exports are redone.
# 2: grid_index [rows, grid_cols] and token_cell [tokens, 2] (GatherND) replace the flat grid maps.
# 3: a GGUF head's 4-bit ranking copy as Q4_0 blocks for GgufMatMul (clika_quant.q4_0_scan).
# 4: the sensitivity pass also weighs GgufMatMul layer matrices wider than 4 bits (gemma-3-270m).
# 5: a GGUF head ranks with its Q4_0 copy; gated MLPs' activation inside GgufMatMul (fuse_swiglu).
# 6: each layer's attention as the kernel library's StepAttention (graph/step_attention.py).
# 7: the sensitivity pass moves more groups to fp32 until its measured KL meets the target.
# 8: the head's re-score as the kernel library's HeadRescore (graph/head_rescore.py).
# 9: the Q4_0 / Q4_1 matrices the sensitivity pass keeps in fp32 say fp32_form "split16".
GRAPH_REVISION = 9
KV_MODE = "continuous"
# Embeddings of a checkpoint that names no pooling average its tokens' hidden states.
DEFAULT_POOLING = "mean"
# The context window of an export nobody asked a size for, and the largest one may ask for.
DEFAULT_MAX_CONTEXT = 32768
MAX_CONTEXT_WINDOW = 1 << 20


class ExportError(RuntimeError):
    """An export that could not be completed (the message names the problem)."""


def export(
    source: str | Path,
    out: str | Path,
    precision: str = "fp32",
    context_window: int | None = None,
    progress: bool = True,
    *,
    overwrite: bool = False,
    verify: bool = True,
    threads: int | None = None,
    answers: int = 0,
    quant_options: dict[str, Any] | None = None,
    builder: str = "auto",
    mmproj: str | Path | None = None,
) -> Path:
    """Export ``source`` (a Hugging Face folder or a ``.gguf`` file) into the model folder ``out``.

    ``mmproj``: llama.cpp's vision half of a GGUF ``source`` (``clika_export.media.mmproj_pair``):
    the step graphs then take image embeddings and the folder gets the vision tower.

    ``builder``: "native" (the families of ``clika_export.families``), "optimum" (optimum's ONNX
    exporter, Hugging Face folders only; ``clika_export.fallback``) or "auto": native when a
    family builds the architecture, else optimum when it does, else refused naming both lists.

    ``quant_options``: ``clika_quant.QuantOptions`` fields that differ from the precision's defaults.
    ``answers``: also answer that many questions of the factual set (``clika_quant.answers``, 50
    in all) and record the accuracy in the manifest's quality report (fetches the set on first use).
    """
    source, out = Path(source), Path(out)
    if out.exists() and not overwrite:
        raise ExportError(f"{out} already exists (pass overwrite=True to replace it)")
    quantizer = _quantizer(precision)
    vision_family = check_pair(source, Path(mmproj)) if mmproj is not None else None
    if choose_builder(source, builder) == OPTIMUM_BUILDER:
        return _export_with_optimum(
            source, out, precision, context_window, progress, overwrite, quant_options
        )
    # read, build, (quantize,) (verify,) write, calibrate
    report = Progress(progress, stages=4 + (precision != "fp32") + bool(verify) + bool(answers))
    with report.stage(f"reading {source.name}"):
        checkpoint = read_source(source)
        check_chat_template(checkpoint)
    sensitive = sensitivity_planned(precision, quant_options, checkpoint.architecture)
    media = vision_family is not None or has_media_tower(source)
    family = family_for(checkpoint)
    context = resolve_context_window(checkpoint, context_window)
    out.parent.mkdir(parents=True, exist_ok=True)
    with terminated_as_exit():  # SIGTERM unwinds through the cleanup below
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
        work.chmod(0o755)  # mkdtemp makes it private; the model folder is an ordinary one
        try:
            # The float reference runs alongside the build, on the tensors it reads.
            sequences = check_sequences(checkpoint.architecture)
            spec = family.decoder_spec(checkpoint, context)
            reference = StreamingReference(spec, sequences) if verify else None
            with report.steps("building graph", checkpoint.architecture.num_layers) as on_layer:
                built = family.build(
                    checkpoint,
                    work,
                    context,
                    on_layer=_both(on_layer, reference.layer_done if reference else None),
                    on_tensor=reference.observe if reference else None,
                    media_inputs=media,
                )
            expected = reference.logits() if reference else None
            record = {"weights": "fp32", "matrices": built.matrices}
            if precision != "fp32":
                with report.steps(
                    f"quantizing to {precision}", len(built.matrices), unit="matrix"
                ) as on_matrix:
                    record = quantizer(
                        work / built.model_file,
                        checkpoint,
                        precision,
                        matrices=built.matrices,
                        options=quant_options,
                        on_matrix=on_matrix,
                    )
            written = _write_folder(work, checkpoint, built, context, record, {})
            # Before any measurement, so the errors the folder states are its own graph's;
            # the twins derive from it read back with GroupQueryAttention (gqa_form).
            add_step_attention_in_place(work)
            add_head_rescore_in_place(work)
            if record.get("options", {}).get("requantize_target_kl") is not None:
                name = "choosing 4 or 8 bits per matrix by measured error"
                with report.steps(name, 0, unit="probe", numbered=False) as on_probe:
                    record = choose_bits_by_sensitivity(work, record, threads=threads, on_probe=on_probe)
                written = _write_folder(work, checkpoint, built, context, record, {})
            if record.get("options", {}).get("fuse_swiglu"):  # after the pass that replaces nodes
                record = fuse_swiglu_in_place(work / built.model_file, record)  # what is measured next
            if sensitive and wants_sensitivity(record, checkpoint.architecture):
                name = "choosing int8 or fp32 compute per layer by measured error"
                with report.steps(name, 0, unit="probe", numbered=False) as on_probe:  # part of quantizing
                    record = choose_levels_by_sensitivity(work, record, threads=threads, on_probe=on_probe)
            quality: dict[str, Any] = {}
            if expected is not None:
                name = "verifying against the float reference"
                with report.steps(name, len(CHECK_PLAN), unit="step") as on_step:
                    result = check_graph(
                        work / built.model_file,
                        written,
                        sequences,
                        expected,
                        threads=threads,
                        on_step=on_step,
                    )
                    quality = {"reference_check": _judge(result, precision)}
            if answers:
                with report.stage("answering the factual question set"):
                    quality["answers"] = measure_answers(work, answers, threads=threads)
            with report.stage("writing the model folder"):
                _write_folder(work, checkpoint, built, context, record, quality)
                add_hidden_states_in_place(work)  # before the twins derive from it: they inherit it
                add_paged_graph(work)  # the paged KV mode's graph, on the same weights
            with report.stage("calibrating the int8 KV cache"):
                try:
                    manifest = add_int8_kv_graph(work, threads=threads)  # its twin with an int8 cache
                except KVQuantError as exc:  # e.g. weights that make the keys non-finite
                    raise ExportError(f"the int8 KV cache could not be calibrated: {exc}") from None
                if vision_family is not None:
                    attach_mmproj(Path(mmproj), vision_family, checkpoint, work)
                elif media:
                    attach_towers(source, work)
                Manifest.read(work)  # the folder must read back as a complete model
            _publish(work, out, overwrite)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    report.note(f"wrote {out} ({manifest.architecture.family}, {precision}, context {context})")
    return out


def choose_builder(source: Path, builder: str = "auto") -> str:
    """Which exporter builds ``source``: ``NATIVE_BUILDER`` or ``OPTIMUM_BUILDER`` (see ``export``)."""
    if builder not in ("auto", *BUILDERS):
        raise ExportError(f"builder {builder!r} is not one of auto, {', '.join(BUILDERS)}")
    if not is_hf_folder(source):
        if builder == OPTIMUM_BUILDER:
            raise ExportError(f"optimum's exporter reads Hugging Face folders; {source.name} is not one")
        return NATIVE_BUILDER
    if builder != "auto":
        return builder
    config = read_config(source)
    refuse_unbuilt(config)  # a multimodal family named before the two lists
    if family_name(config) in FAMILIES or is_multimodal(config):  # Idefics3: its llama text model
        return NATIVE_BUILDER
    if optimum_covers(model_type(config)):
        return OPTIMUM_BUILDER
    raise CheckpointError(
        f"architecture {model_type(config)!r} is not supported: no native family builds it "
        f"({', '.join(supported())}) and neither does optimum's ONNX exporter for text generation "
        f"({', '.join(TEXT_GENERATION_TYPES)})"
    )


def _export_with_optimum(
    source: Path,
    out: Path,
    precision: str,
    context_window: int | None,
    progress: bool,
    overwrite: bool,
    quant_options: dict[str, Any] | None,
) -> Path:
    """The fallback export (``clika_export.fallback``) into a temporary folder, published when complete."""
    report = Progress(progress, stages=3 + (precision != "fp32"))  # fetch, export, (quantize,) write
    out.parent.mkdir(parents=True, exist_ok=True)
    with terminated_as_exit():
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
        work.chmod(0o755)
        try:
            try:
                manifest = build_with_optimum(
                    source,
                    work,
                    precision,
                    context_window,
                    report,
                    quant_options=quant_options,
                    quantizer=_quantizer(precision),
                )
            except (ToolchainError, OptimumExportError, PastKVGraphError) as exc:
                raise ExportError(str(exc)) from None
            _publish(work, out, overwrite)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    report.note(f"wrote {out} ({manifest.architecture.family} through optimum, {precision})")
    return out


def _quantizer(precision: str) -> Callable[..., dict[str, Any]]:
    """The quantization hook: the one place the export reaches ``clika_quant``.

    ``clika_quant.quantize_model(model_path, checkpoint, precision, matrices=...)``
    rewrites the float graph at ``model_path`` (and its external data file) in
    place and returns the manifest's ``precision`` record. ``matrices`` names
    each weight initializer's roles, consumer nodes, layout (``in_out`` for a
    MatMul ``B``, ``out_in`` for a table read by rows) and the checkpoint
    tensors it was made from (whose GGUF blocks ``checkpoint.raw`` supplies).
    Looked up before the export starts, so a missing pass fails fast.
    """
    if precision == "fp32":
        return lambda *args, **kwargs: {}
    try:
        from clika_quant import quantize_model
        from clika_quant.options import PRECISIONS
    except ImportError as exc:
        raise ExportError(
            f"precision {precision!r} needs the quantization pass, which is not available: {exc}"
        ) from None
    if precision not in PRECISIONS:
        raise ExportError(f"precision {precision!r} is not supported (supported: {', '.join(PRECISIONS)})")
    return quantize_model


def _judge(result: dict[str, Any], precision: str) -> dict[str, Any]:
    """An fp32 graph must match the float reference within ``FP32_TOLERANCE``; others are measured."""
    if precision == "fp32" and result["max_rel_logits_error"] > FP32_TOLERANCE:
        raise ExportError(
            f"the exported graph does not match the reference: relative logits error "
            f"{result['max_rel_logits_error']:.2e} > {FP32_TOLERANCE:.0e}"
        )
    return result


def _both(first: Callable[[int], None], second: Callable[[int], None] | None) -> Callable[[int], None]:
    if second is None:
        return first

    def call(index: int) -> None:
        first(index)
        second(index)

    return call


def has_media_tower(source: Path) -> bool:
    """True for a Hugging Face folder of a multimodal family whose vision or audio tower is exported too
    (its step graph then takes the media embeddings, ``clika_runtime.contract.step_graph.MEDIA_INPUTS``)."""
    if not is_hf_folder(source):
        return False
    try:
        return is_multimodal(read_json(source / "config.json"))
    except CheckpointError:
        return False  # reading the checkpoint names the problem


def read_source(source: Path) -> Checkpoint:
    """Read a Hugging Face folder or a GGUF file into a ``Checkpoint``.

    The checkpoint is untrusted input: whatever reading it raises beyond the
    readers' own checks becomes a CheckpointError naming the source.
    """
    try:
        return _read_source(source)
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"{source.name} could not be read ({type(exc).__name__}: {exc})") from None


def _read_source(source: Path) -> Checkpoint:
    if is_hf_folder(source):
        return read_hf(source)
    if source.is_file() and source.suffix.lower() == ".gguf":
        from clika_export.readers.gguf import read_gguf

        return read_gguf(source)
    if not source.exists():
        raise CheckpointError(f"{source} does not exist")
    raise CheckpointError(
        f"{source.name} is neither a Hugging Face model folder (config.json) nor a .gguf file"
    )


def source_sha256(source: str | Path) -> str:
    """The sha256 a reader records for ``source`` (a folder digest for Hugging Face folders)."""
    source = Path(source)
    return folder_sha256(source) if source.is_dir() else file_sha256(source)


def resolve_context_window(checkpoint: Checkpoint, requested: int | None) -> int:
    """The context window to build: what the user asks for, else the model's, capped.

    A checkpoint's claimed context sizes the rotary tables (and the runtime's KV
    cache): GGUF metadata claiming 2^24 tokens made a 98 MB model an 8 GB export.
    Unasked, the window is at most DEFAULT_MAX_CONTEXT; asked, at most
    MAX_CONTEXT_WINDOW and the model's own.
    """
    limit = checkpoint.architecture.max_position_embeddings
    if requested is None:
        return min(limit, DEFAULT_MAX_CONTEXT)
    if not 1 <= requested <= limit:
        raise ExportError(
            f"context window {requested} is outside 1..{limit} (the model's max_position_embeddings)"
        )
    if requested > MAX_CONTEXT_WINDOW:
        raise ExportError(f"context window {requested} is too large: at most {MAX_CONTEXT_WINDOW} tokens")
    return requested


# -- the cache ---------------------------------------------------------------------


def cache_key(
    sha256: str,
    precision: str,
    context_window: int | None,
    builder: str = "auto",
    mmproj_sha256: str | None = None,
    quant_options: dict[str, Any] | None = None,
) -> str:
    """What makes two exports the same: source bytes, options and the exporter's version
    (``quant_options``: the fields that differ from the precision's defaults)."""
    parts = {
        "source_sha256": sha256,
        "precision": precision,
        "context_window": context_window,
        "tool_version": __version__,
        "graph_revision": GRAPH_REVISION,
    }
    if builder != "auto":  # only a builder asked for by name: earlier keys stay valid
        parts["builder"] = builder
    if mmproj_sha256 is not None:  # likewise only with a vision half
        parts["mmproj_sha256"] = mmproj_sha256
    if precision != "fp32":  # a new default quantization scheme must not reuse older exports
        try:
            from clika_quant.options import QuantOptions
        except ImportError:
            pass  # the export itself refuses, naming what is missing
        else:
            parts["quant_options"] = QuantOptions.for_precision(precision, quant_options).to_dict()
            parts["block_sum_form"] = BLOCK_SUM_FORM  # the offsets' graph form changes the numerics
            # The sensitivity pass measures the folder on this process's compute path (the kernel
            # library's ISA and engines, or the MatMulNBits fallback) and records that error: an
            # export measured on one path must not be served where the other runs.
            parts["measured_with"] = kernel_status().compute_path()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def cached_export(
    source: str | Path,
    precision: str = "fp32",
    context_window: int | None = None,
    progress: bool = True,
    *,
    cache: Path | None = None,
    sha256: str | None = None,
    builder: str = "auto",
    mmproj: str | Path | None = None,
) -> Path:
    """The model folder exported from ``source`` with these options, exported once and cached.

    ``sha256`` may be passed when already known (a fetched file) to skip hashing the source.
    ``mmproj``: as ``export``'s; the key holds its sha256 too.
    """
    from clika_export.pull.fetch import cache_root

    vision = file_sha256(Path(mmproj)) if mmproj is not None else None
    key = cache_key(sha256 or source_sha256(source), precision, context_window, builder, vision)
    folder = (cache or cache_root()) / "exports" / key
    with held_lock(folder.with_name(f".{key}.lock")):
        return _cached_or_exported(source, folder, precision, context_window, progress, builder, mmproj)


def _cached_or_exported(
    source: str | Path,
    folder: Path,
    precision: str,
    context_window: int | None,
    progress: bool,
    builder: str,
    mmproj: str | Path | None,
) -> Path:
    try:
        if Manifest.read(folder).graphs["continuous"].builder == OPTIMUM_BUILDER:
            return folder  # continuous float32 KV only: no paged or int8 KV twins to add
        ensure_paged_graph(folder)  # exported before this paged graph existed: derive it, keep the rest
        ensure_int8_kv_graph(folder)  # likewise the int8 KV cache's graph
        ensure_hidden_states(folder)  # and every graph's hidden_states output, for embeddings
        return folder
    except (ManifestError, KeyError):
        pass  # absent or broken: export (again)
    return export(
        source, folder, precision, context_window, progress, overwrite=True, builder=builder, mmproj=mmproj
    )


# -- writing -----------------------------------------------------------------------


def _write_folder(
    work: Path,
    checkpoint: Checkpoint,
    built: BuiltGraph,
    context: int,
    precision: dict[str, Any],
    quality: dict[str, Any],
) -> Manifest:
    write_text_files(work, checkpoint)
    manifest = Manifest(
        architecture=checkpoint.architecture,
        context_window=context,
        graphs={KV_MODE: _graph_spec(built)},
        tokenizer=tokenizer_spec(checkpoint),
        precision=precision,
        provenance=provenance(checkpoint),
        generation_defaults=dict(checkpoint.generation_defaults),
        chat_template_file=TEMPLATE_FILE if checkpoint.chat_template else None,
        quality=quality,
        embedding={"pooling": checkpoint.pooling or DEFAULT_POOLING},
        rope_tables=built.rope_tables,
        format_version=COMPUTED_TABLES_VERSION if built.rope_tables else FORMAT_VERSION,
    )
    manifest.write(work)
    return manifest


def _graph_spec(built: BuiltGraph) -> GraphSpec:
    kv = KVSpec(
        layout="BNSH",
        dtype="float32",
        past_key=PAST_KEY,
        past_value=PAST_VALUE,
        present_key=PRESENT_KEY,
        present_value=PRESENT_VALUE,
    )
    return GraphSpec(
        file=built.model_file, inputs=built.inputs, outputs=built.outputs, kv=kv, logits_output=LOGITS
    )


def _publish(work: Path, out: Path, overwrite: bool) -> None:
    """Move the finished folder to ``out``; an old folder is replaced only once the new one is complete."""
    if not out.exists():
        work.rename(out)
        return
    if not overwrite:
        raise ExportError(f"{out} appeared while exporting; the export was not written")
    old = out.with_name(f".{out.name}.old-{work.name}")
    out.rename(old)
    work.rename(out)
    shutil.rmtree(old, ignore_errors=True)
