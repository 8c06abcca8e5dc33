"""The contract between an exported model folder and the runtime.

A model folder holds ``manifest.json`` plus the files it names (ONNX graphs with
external weights, ``tokenizer.json``, the chat template). The runtime reads
everything it needs from the manifest and never gives meaning to a file name.

Graph contract (``GraphSpec``), one ORT call = one engine step for a batch
(one row per KV slot):

* the new tokens of all rows are *packed* into one axis ``T`` (so the weight
  MatMuls cost only real tokens, whatever the mix of prefill and decode rows);
* attention works on a padded ``[B, S]`` grid (``S`` = the most new tokens a row
  has this step): ``grid_index[row, col]`` (int64 ``[B, S]``) names the packed
  token filling each cell and ``token_cell[t]`` (int64 ``[T, 2]``) is the
  ``(row, col)`` of packed token ``t``; folders exported before these took
  ``grid_index`` flat (``[B * S]``) and ``token_index[t] = row * S + col``
  instead of ``token_cell``, and the runtime still feeds them
  (``clika_runtime.contract.step_graph.GridLayout``);
* each row ``b`` has ``query_seqlens[b]`` new tokens (0 = idle row) after
  ``past_len[b]`` cached ones; ``seqlens_k[b] = past_len[b] + query_seqlens[b] - 1``
  (0 for an idle row); ``total_sequence_length`` is the step's largest
  ``seqlens_k + 1``; rotary positions ``past_len + col`` are computed inside
  the graph (no position ids);
* ``logits_index`` picks which packed positions get logits (each row's last
  token when decoding, every position for perplexity or speculative checks).

``clika_runtime.contract.step_graph.pack_step`` builds these arrays and documents
each row kind and the capacity rule (an active row needs ``past_len + S <= capacity``).

``precision["matrices"]`` maps each weight initializer (``model.layers.3.attn.qkv.weight``,
stored ``[in, out]`` for MatMul) to its ``roles``, consumer ``nodes``, ``layer``,
``layout`` (``in_out`` or ``out_in``), ``shape`` and the checkpoint tensors it
was made from (``sources``), so a quantization pass finds every matrix.

KV inputs/outputs are named per layer from ``kv.past_key`` etc. with ``{layer}``
substituted; in ``continuous`` mode past and present are bound to the same
NumPy buffer of shape ``[slots, kv_heads, capacity, head_dim]`` so the graph
updates the cache in place.

``rope_tables`` lists the rotary tables every graph holds as an empty
placeholder and the parameters the runtime computes them from when it opens a
session (``clika_runtime.contract.rope_tables``); older folders store them and list none.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any

from clika_runtime.contract.rope_tables import RopeTable, RopeTableError, rope_tables_from_json

FORMAT_NAME = "clika-model"
FORMAT_VERSION = 1
# Folders whose graphs hold rope tables as placeholders (``rope_tables``) say 2, so a runtime that
# cannot compute them refuses the folder by its version instead of failing at the first step.
COMPUTED_TABLES_VERSION = 2
READ_VERSIONS = (FORMAT_VERSION, COMPUTED_TABLES_VERSION)
MANIFEST_FILE = "manifest.json"

# KV cache element types a folder's graphs may hold; float32 is every folder's own.
KV_CACHE_DTYPES = ("float32", "int8")


def graph_key(kv_mode: str, kv_dtype: str = "float32") -> str:
    """The ``graphs`` key of ``kv_mode``'s graph with a ``kv_dtype`` cache: "continuous", "continuous:int8"."""
    return kv_mode if kv_dtype == "float32" else f"{kv_mode}:{kv_dtype}"


class ManifestError(ValueError):
    """A model folder whose manifest is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class Architecture:
    family: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    rope_scaling: dict[str, Any] | None = None


@dataclass(frozen=True)
class KVSpec:
    """How the graph's KV cache inputs/outputs are named and laid out."""

    layout: str  # "BNSH": [batch_or_slots, kv_heads, capacity, head_dim]; paged "NBSH": [kv_heads, blocks, block_size, head_dim]
    dtype: str  # numpy dtype name, e.g. "float32"
    past_key: str  # e.g. "past_key.{layer}"
    past_value: str
    present_key: str
    present_value: str
    # Paged graphs only: block size in tokens (None for continuous graphs).
    block_size: int | None = None


# Who built a graph: the exporter's own families (the step graph above), or optimum's ONNX
# exporter for architectures no family covers: a graph of one sequence's new tokens
# (``input_ids``, ``attention_mask``, maybe ``position_ids``, ``[1, n]``) whose past goes in as
# ``past_key_values.{layer}.key`` / ``.value`` ``[1, kv_heads, past, head_dim]`` and comes out
# with the new tokens appended (``present.{layer}.*``); ``engine.past_kv_runner`` drives it.
NATIVE_BUILDER, OPTIMUM_BUILDER = "native", "optimum"
BUILDERS = (NATIVE_BUILDER, OPTIMUM_BUILDER)


@dataclass(frozen=True)
class GraphSpec:
    file: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    kv: KVSpec
    logits_output: str = "logits"
    builder: str = NATIVE_BUILDER


@dataclass(frozen=True)
class VisionSpec:
    """The vision tower + projector graph: pixels in, text-width embeddings out.

    One ORT call embeds a request's images; ``image_embeds`` rows then stand in
    for the image placeholder tokens of the prompt. ``inputs`` / ``outputs`` are
    the graph's names (``family`` says what each holds and which preprocessing,
    read from ``processor_file``, makes them); ``details`` holds the family's
    layout numbers (patch size, merge size, tokens per tile ...).
    """

    file: str
    family: str  # a media.families vision family: "idefics3" | "qwen2_vl"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    text_hidden_size: int
    processor_file: str
    embeds_output: str = "image_embeds"
    image_token_id: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    video_token_id: int | None = None  # Qwen2-VL's <|video_pad|>: a clip's merged patches


@dataclass(frozen=True)
class AudioSpec:
    """The audio encoder + projector graph: log-mel features in, text-width embeddings out.

    One ORT call embeds one clip (a 30 s chunk of features); its first rows
    stand in for the prompt's audio placeholder tokens. ``details`` holds the
    feature extractor's settings (``clika_runtime.media.audio_features.AudioSettings``).
    """

    file: str
    family: str  # a media.families audio family: "qwen2_audio"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    text_hidden_size: int
    embeds_output: str = "audio_embeds"
    audio_token_id: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenizerSpec:
    file: str
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None
    add_bos_token: bool
    bos_token: str | None = None
    eos_token: str | None = None


@dataclass(frozen=True)
class Provenance:
    source: str  # what the user named (a file or folder name, never an absolute path)
    source_format: str  # "gguf" | "hf"
    source_sha256: str
    tool: str
    tool_version: str
    exported_at: str


@dataclass(frozen=True)
class Manifest:
    architecture: Architecture
    context_window: int
    graphs: dict[str, GraphSpec]  # by graph_key: "continuous", "paged", "continuous:int8"
    tokenizer: TokenizerSpec
    precision: dict[str, Any]
    provenance: Provenance
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    chat_template_file: str | None = None
    quality: dict[str, Any] = field(default_factory=dict)
    vision: VisionSpec | None = None  # multimodal folders only
    audio: AudioSpec | None = None  # folders whose model hears audio
    # How embeddings pool the ``hidden_states`` output: {"pooling": "mean" | "last" | "cls"}.
    embedding: dict[str, Any] = field(default_factory=dict)
    # Rope tables the graphs hold as placeholders, computed at load (clika_runtime.contract.rope_tables).
    rope_tables: tuple[RopeTable, ...] = ()
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    def write(self, folder: Path) -> None:
        (Path(folder) / MANIFEST_FILE).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        try:
            if data.get("format") != FORMAT_NAME:
                raise ManifestError(f"not a {FORMAT_NAME} manifest (format={data.get('format')!r})")
            version = data.get("format_version")
            if type(version) is not int or version not in READ_VERSIONS:
                raise ManifestError(
                    f"manifest format_version {version!r} is not supported "
                    f"(this runtime reads versions {', '.join(map(str, READ_VERSIONS))})"
                )
            graphs = {
                mode: GraphSpec(
                    file=folder_file_name(g["file"], f"graphs.{mode}.file"),
                    inputs=tuple(g["inputs"]),
                    outputs=tuple(g["outputs"]),
                    kv=_build(KVSpec, g["kv"]),
                    logits_output=g.get("logits_output", "logits"),
                    builder=_builder(g.get("builder", NATIVE_BUILDER), mode),
                )
                for mode, g in data["graphs"].items()
            }
            tok = dict(data["tokenizer"])
            tok["eos_token_ids"] = tuple(tok["eos_token_ids"])
            tok["file"] = folder_file_name(tok["file"], "tokenizer.file")
            template_file = data.get("chat_template_file")
            architecture = _build(Architecture, data["architecture"])
            context_window = int(data["context_window"])
            return cls(
                architecture=architecture,
                context_window=context_window,
                graphs=graphs,
                vision=_vision(data["vision"]) if data.get("vision") else None,
                audio=_audio(data["audio"]) if data.get("audio") else None,
                tokenizer=_build(TokenizerSpec, tok),
                precision=dict(data["precision"]),
                provenance=_build(Provenance, data["provenance"]),
                generation_defaults=dict(data.get("generation_defaults", {})),
                chat_template_file=None
                if template_file is None
                else folder_file_name(template_file, "chat_template_file"),
                quality=dict(data.get("quality", {})),
                embedding=dict(data.get("embedding") or {}),
                rope_tables=_rope_tables(data.get("rope_tables"), context_window, architecture.head_dim),
                format_version=version,
            )
        except ManifestError:
            raise
        except KeyError as exc:
            raise ManifestError(f"manifest is missing the field {exc.args[0]!r}") from None
        except (TypeError, AttributeError, ValueError, OverflowError) as exc:
            # A section of the wrong kind (null or a list where an object goes, text for a number,
            # Infinity, which Python's JSON reader takes, where a whole number goes).
            raise ManifestError(f"manifest has a malformed section: {exc}") from None

    @classmethod
    def read(cls, folder: str | Path) -> Manifest:
        path = Path(folder) / MANIFEST_FILE
        if not path.is_file():
            raise ManifestError(f"{folder} is not a model folder: no {MANIFEST_FILE}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ManifestError(f"{path.name} is not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ManifestError(f"{path.name} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
        if not isinstance(data, dict):
            raise ManifestError(f"{path.name} is not a JSON object (it holds a {type(data).__name__})")
        manifest = cls.from_dict(data)
        manifest.check_files(Path(folder))
        return manifest

    def check_files(self, folder: Path) -> None:
        named = [self.tokenizer.file, *(g.file for g in self.graphs.values())]
        if self.vision is not None:
            named += [self.vision.file, self.vision.processor_file]
        if self.audio is not None:
            named.append(self.audio.file)
        if self.chat_template_file:
            named.append(self.chat_template_file)
        root = folder.resolve()
        for name in named:
            if not (folder / name).resolve().is_relative_to(root):
                raise ManifestError(f"{name} named by the manifest links outside the model folder")
            if not (folder / name).is_file():
                raise ManifestError(f"model folder is incomplete: {name} named by the manifest is missing")


def _rope_tables(value: Any, context_window: int, head_dim: int) -> tuple[RopeTable, ...]:
    try:
        return rope_tables_from_json(value, context_window=context_window, head_dim=head_dim)
    except RopeTableError as exc:
        raise ManifestError(f"manifest {exc}") from None


def _builder(name: Any, mode: str) -> str:
    if name not in BUILDERS:
        raise ManifestError(f"manifest graphs.{mode}.builder {name!r} is not one of {', '.join(BUILDERS)}")
    return name


def _vision(data: dict[str, Any]) -> VisionSpec:
    files = {key: folder_file_name(data.get(key), f"vision.{key}") for key in ("file", "processor_file")}
    return _build(VisionSpec, {**data, **files})


def _audio(data: dict[str, Any]) -> AudioSpec:
    return _build(AudioSpec, {**data, "file": folder_file_name(data.get("file"), "audio.file")})


def folder_file_name(name: Any, field_name: str) -> str:
    """A file name the manifest gives, checked to name a file inside the folder.

    The manifest is untrusted: a name that climbs out (``..``), is absolute or
    is not a plain relative path would let a folder read any file on the machine.
    """
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name:
        raise ManifestError(f"manifest {field_name} is not a plain file name: {name!r}")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise ManifestError(f"manifest {field_name} {name!r} points outside the model folder")
    return name


def _build(kind: type, data: dict[str, Any]) -> Any:
    """Build a dataclass from a dict, refusing unknown keys by name."""
    known = {f.name for f in fields(kind)}
    unknown = set(data) - known
    if unknown:
        raise ManifestError(f"unknown {kind.__name__} fields in manifest: {sorted(unknown)}")
    values = dict(data)
    for key, value in values.items():
        if isinstance(value, list):
            values[key] = tuple(value)
    return kind(**values)
