"""Run one engine step as one ONNX Runtime call: the only module that runs ORT.

Bindings persist across steps. The KV buffers are bound once as both past and
present (the graph updates them in place) and again only when the cache
replaces them. Each step input keeps a bound NumPy array: when the new step's
array has the same shape it is copied into the bound one (no rebinding), and
only a changed shape rebinds; a read-only array already copied last step is
not copied again. The logits output is bound to a preallocated array the same way.

The cache packs the grid maps in the current layout; a continuous graph exported
before it (``GridLayout.FLAT``, told by the session's input names at load) gets
them converted.

A graph that takes media embeddings (a folder with a vision tower) gets, each
step, the rows of the plan's media positions (``step_graph.pack_media``, in the
cache's packing order); a step without media feeds the same read-only empty
arrays every time, so binding them costs nothing.

An M-RoPE graph (Qwen2-VL) gets, each step, the rotary positions of the plan's
tokens that are not at their KV index (``step_graph.pack_mrope``: a sequence's
image tokens and everything after them), from each sequence's ``RopeSpan``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import numpy as np
import onnxruntime as ort

from clika_runtime.contract.manifest import GraphSpec
from clika_runtime.contract.step_graph import (
    MEDIA_EMBEDS,
    FlatGridFeeds,
    GridLayout,
    grid_layout,
    pack_media,
    pack_mrope,
    takes_media,
    takes_mrope,
)
from clika_runtime.engine.kv.kv_cache import KVCacheManager
from clika_runtime.engine.step_plan import StepPlan


@dataclass
class StepTiming:
    """Where one step's time went: packing and binding in Python, the ORT call itself."""

    host_s: float = 0.0
    model_s: float = 0.0


@dataclass(eq=False, repr=False)
class GraphRunner:
    """What every step runner holds: the ORT session and the graph it runs, the cache whose buffers
    a step reads and writes, the model's sizes, and where the last step's time went."""

    session: ort.InferenceSession
    graph: GraphSpec
    cache: KVCacheManager
    _: KW_ONLY
    num_layers: int
    vocab_size: int
    timing: StepTiming = field(default_factory=StepTiming, init=False)


@dataclass(eq=False, repr=False)
class Executor(GraphRunner):
    """Runs the step graph over the cache's slots with persistent IO bindings."""

    _: KW_ONLY
    context_window: int

    def __post_init__(self) -> None:
        session = self.session
        self.binding = session.io_binding()
        self._kv_version = -1
        self._kv_values: list[ort.OrtValue] = []  # the bindings refer to these: keep them alive
        self._inputs: dict[str, tuple[np.ndarray, ort.OrtValue]] = {}
        self._sources: dict[str, np.ndarray] = {}  # the array each input was last copied from
        self._logits: tuple[np.ndarray, ort.OrtValue] | None = None
        inputs = {value.name: value for value in session.get_inputs()}
        layout = grid_layout(inputs)
        self._flat_grid = FlatGridFeeds() if layout is GridLayout.FLAT else None
        self.takes_media = takes_media(inputs)
        self.media_width = _media_width(inputs[MEDIA_EMBEDS].shape) if self.takes_media else None
        self._no_media = _no_media(self.media_width) if self.takes_media else {}
        self.takes_mrope = takes_mrope(inputs)
        self._no_mrope = _read_only(pack_mrope([])) if self.takes_mrope else {}

    def run(self, plan: StepPlan, before_call: Callable[[], None] | None = None) -> np.ndarray:
        """Run ``plan``; returns logits ``[len(plan.sample_rows), vocab]`` in ``sample_rows`` order.

        ``before_call`` runs right before the ORT call (which releases the GIL).
        The returned array may be the bound output: it is valid until the next run.
        """
        start = time.perf_counter()
        self._bind_cache()
        packed = self.cache.pack(plan, self.context_window)
        feeds = packed.feeds if self._flat_grid is None else self._flat_grid.convert(packed.feeds)
        if self.takes_media:
            feeds = {**feeds, **self._media_feeds(plan)}
        if self.takes_mrope:
            feeds = {**feeds, **self._mrope_feeds(plan)}
        for name, array in feeds.items():
            self._bind_input(name, array)
        logits = self._bind_logits(packed.num_logits)
        if before_call is not None:
            before_call()
        called = time.perf_counter()
        self.session.run_with_iobinding(self.binding)
        returned = time.perf_counter()
        picked_rows = packed.sample_logits
        # Every row samples (plain decode): hand out the bound array itself, no copy.
        picked = logits if picked_rows == list(range(len(logits))) else logits[picked_rows]
        self.timing = StepTiming(
            host_s=(called - start) + (time.perf_counter() - returned), model_s=returned - called
        )
        return picked

    def _media_feeds(self, plan: StepPlan) -> dict[str, np.ndarray]:
        if all(row.seq.media is None for row in plan.rows):
            return self._no_media
        order = self.cache.packing_order(plan)
        spans = [(None if r.seq.media is None else r.seq.media.span, r.start, r.num_new) for r in order]
        return pack_media(spans, self.media_width or 0)

    def _mrope_feeds(self, plan: StepPlan) -> dict[str, np.ndarray]:
        if all(row.seq.rope is None for row in plan.rows):
            return self._no_mrope
        order = self.cache.packing_order(plan)
        return pack_mrope([(r.seq.rope, r.start, r.num_new) for r in order])

    def _bind_cache(self) -> None:
        if self.cache.version == self._kv_version:
            return
        keys, values = self.cache.buffers()
        kv = self.graph.kv
        self._kv_values = []
        for layer in range(self.num_layers):
            for past, present, array in (
                (kv.past_key, kv.present_key, keys[layer]),
                (kv.past_value, kv.present_value, values[layer]),
            ):
                # One OrtValue over the NumPy buffer as input and output: updated in place.
                shared = ort.OrtValue.ortvalue_from_numpy(array)
                self.binding.bind_ortvalue_input(past.format(layer=layer), shared)
                self.binding.bind_ortvalue_output(present.format(layer=layer), shared)
                self._kv_values.append(shared)
        self._kv_version = self.cache.version

    def _bind_input(self, name: str, array: np.ndarray) -> None:
        if self._sources.get(name) is array and not array.flags.writeable:
            return  # the very array copied last step, read-only since: the bound copy is current
        self._sources[name] = array
        bound = self._inputs.get(name)
        if bound is not None and bound[0].shape == array.shape and bound[0].dtype == array.dtype:
            np.copyto(bound[0], array)
            return
        # np.array, not ascontiguousarray: that turns a 0-d array (the scalar input) into
        # shape (1,), which then never matches the next step's () and rebinds every step.
        kept = np.array(array, order="C", copy=True)
        value = ort.OrtValue.ortvalue_from_numpy(kept)
        self.binding.bind_ortvalue_input(name, value)
        self._inputs[name] = (kept, value)

    def _bind_logits(self, rows: int) -> np.ndarray:
        if self._logits is None or self._logits[0].shape[0] != rows:
            array = np.empty((rows, self.vocab_size), dtype=np.float32)
            value = ort.OrtValue.ortvalue_from_numpy(array)
            self.binding.bind_ortvalue_output(self.graph.logits_output, value)
            self._logits = (array, value)
        return self._logits[0]


def _media_width(shape: list) -> int | None:
    """The embeddings' width a graph declares (its second dimension), None when symbolic."""
    width = shape[1] if len(shape) == 2 else None
    return width if isinstance(width, int) else None


def _no_media(width: int | None) -> dict[str, np.ndarray]:
    """The media inputs of a step without media: M = 0, read-only so they are bound once."""
    return _read_only(pack_media([], width or 0))


def _read_only(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for array in feeds.values():
        array.flags.writeable = False
    return feeds
