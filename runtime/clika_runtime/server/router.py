"""Which model answers a request: every model the server can serve, loaded on demand, one engine each.

A :class:`ModelRouter` lists the models (the store's cached exports, or one
model given at start) and turns a request's model name into a loaded
:class:`~clika_runtime.server.backend.ModelBackend`. A name not loaded yet is
loaded once, however many requests ask for it while it loads (they wait,
bounded, for that one load); a loaded model stays for its ``keep_alive``
after its last request ends (Ollama's rule; 0 unloads it then, ``inf``
keeps it) and the least recently used idle models are unloaded first when
``max_loaded`` or ``memory_budget`` (weight bytes plus KV budget, see
:mod:`~clika_runtime.server.footprint`) leaves no room for the next one.

Requests hold a lease on their model from the moment it is found until
their work is submitted (``with router.lease(name)``); after that the
backend's own count of running requests keeps it loaded, so a model is
never closed under a request.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from clika_runtime.server.backend import ModelBackend
from clika_runtime.server.errors import ApiError
from clika_runtime.server.keep_alive import DEFAULT_KEEP_ALIVE_S, FOREVER
from clika_runtime.server.model_entries import ModelEntry, find_entry

DEFAULT_LOAD_WAIT_S = 600.0

OpenBackend = Callable[[ModelEntry], ModelBackend]


@dataclass
class LoadedModel:
    """A model in memory: its backend, what it may take, its leases and when it unloads when idle."""

    entry: ModelEntry
    backend: ModelBackend
    footprint: int
    keep_alive: float
    last_used: float = field(default_factory=time.monotonic)
    leases: int = 0
    idle_since: float | None = None  # wall clock; None while requests hold it

    @property
    def idle(self) -> bool:
        return self.leases == 0 and not self.backend.busy

    def expires_at(self) -> float | None:
        """Wall-clock time it unloads (None: never); counted from now while requests hold it."""
        if math.isinf(self.keep_alive):
            return None
        since = self.idle_since if self.idle and self.idle_since is not None else time.time()
        return since + self.keep_alive


class _Loading:
    """A load in progress: the requests that wait for it, and its outcome."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.backend: ModelBackend | None = None
        self.error: BaseException | None = None
        self.waiters = 0


class ModelRouter:
    """The models a server serves, loaded on demand (see the module's note).

    ``listing()`` names the servable models (re-read on each look-up, so a
    pull or delete shows at once); ``open_backend(entry)`` loads one;
    ``footprint_of(entry)`` is the bytes it may take; ``pinned`` backends are
    loaded already and never unloaded (a model handed to ``serve()``).
    """

    def __init__(
        self,
        listing: Callable[[], list[ModelEntry]],
        open_backend: OpenBackend,
        footprint_of: Callable[[ModelEntry], int],
        *,
        default: str | None = None,
        keep_alive: float = DEFAULT_KEEP_ALIVE_S,
        max_loaded: int | None = None,
        memory_budget: int | None = None,
        load_wait: float = DEFAULT_LOAD_WAIT_S,
        pinned: tuple[tuple[ModelEntry, ModelBackend], ...] = (),
    ) -> None:
        if max_loaded is not None and max_loaded < 1:
            raise ValueError(f"max_loaded must be at least 1, got {max_loaded}")
        self._listing = listing
        self._open = open_backend
        self._footprint_of = footprint_of
        self.default = default
        self.keep_alive = keep_alive
        self.max_loaded = max_loaded
        self.memory_budget = memory_budget
        self.load_wait = load_wait
        self.loads = 0  # loads started (a model loaded twice counts twice)
        self.on_cancelled: Callable[[], None] | None = None  # handed to every backend (the metrics' count)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._loaded: dict[str, LoadedModel] = {}
        self._loading: dict[str, _Loading] = {}
        self._closed = False
        for entry, backend in pinned:
            self._loaded[entry.name] = LoadedModel(entry, backend, 0, FOREVER)
            backend.on_cancelled = self._cancelled
        self._reaper = threading.Thread(target=self._reap_forever, name="clika-model-reaper", daemon=True)
        self._reaper.start()

    # -- what is served --------------------------------------------------------------------------

    def entries(self) -> list[ModelEntry]:
        """Every servable model: the listing, and the pinned models it does not name."""
        listed = self._listing()
        names = {entry.name for entry in listed}
        with self._lock:
            pinned = [m.entry for m in self._loaded.values() if m.entry.pinned]
        return listed + [entry for entry in pinned if entry.name not in names]

    def entry(self, requested: str) -> ModelEntry:
        """The model ``requested`` names (404 naming it and what is served)."""
        entries = self.entries()
        found = find_entry(entries, requested)
        if found is None:
            served = ", ".join(repr(entry.name) for entry in entries) or "no model"
            raise ApiError(
                404,
                f"the model {requested!r} does not exist on this server; it serves {served}",
                param="model",
                code="model_not_found",
            )
        return found

    def loaded(self) -> list[LoadedModel]:
        """The models in memory now, most recently used first (those whose keep_alive ran out unloaded first)."""
        self._reap_now()
        with self._lock:
            return sorted(self._loaded.values(), key=lambda m: m.last_used, reverse=True)

    def backend_of(self, name: str) -> ModelBackend | None:
        """``name``'s backend when it is loaded (None: not loaded; nothing is loaded here)."""
        with self._lock:
            model = self._loaded.get(name)
            return None if model is None else model.backend

    def any_backend(self) -> ModelBackend | None:
        """A loaded backend (the most recently used), for what needs one model's view (``/health``)."""
        models = self.loaded()
        return models[0].backend if models else None

    def loading_waiters(self, name: str) -> int:
        """Requests waiting for ``name``'s load right now, the loader included (0: not loading)."""
        with self._lock:
            loading = self._loading.get(name)
            return 0 if loading is None else loading.waiters

    # -- leases ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lease(self, requested: str, keep_alive: float | None = None) -> Iterator[ModelBackend]:
        """The loaded backend for ``requested``, held loaded until the block ends (blocks while it
        loads: run on a worker thread). ``keep_alive`` None: the server's default."""
        model = self._acquire(self.entry(requested), keep_alive)
        try:
            yield model.backend
        finally:
            self._release(model)

    def _acquire(self, entry: ModelEntry, keep_alive: float | None) -> LoadedModel:
        with self._lock:
            self._check_open()
            model = self._loaded.get(entry.name)
            if model is not None:
                self._hold(model, keep_alive)
                return model
            loading = self._loading.get(entry.name)
            loads_here = loading is None
            if loading is None:
                loading = self._loading[entry.name] = _Loading()
                self.loads += 1
            loading.waiters += 1
        if loads_here:
            try:
                self._load(entry, loading, keep_alive)
            except ApiError:
                raise
            except Exception as exc:  # a folder that does not load: named, as its waiters see it
                raise ApiError(500, f"{entry.name} could not be loaded: {exc}", code="load_failed") from exc
        elif not loading.done.wait(self.load_wait):
            with self._lock:
                loading.waiters -= 1
            raise ApiError(
                503, f"{entry.name} is still loading after {self.load_wait:g} s; retry", code="model_loading"
            )
        if loading.error is not None:
            if isinstance(loading.error, ApiError):
                raise loading.error
            raise ApiError(500, f"{entry.name} could not be loaded: {loading.error}", code="load_failed")
        with self._lock:
            loading.waiters -= 1
            model = self._loaded.get(entry.name)
            if model is None or model.backend is not loading.backend:  # unloaded again before we woke
                raise ApiError(503, f"{entry.name} was unloaded while loading; retry", code="model_loading")
            self._hold(model, keep_alive)
            return model

    def _hold(self, model: LoadedModel, keep_alive: float | None) -> None:
        model.leases += 1
        model.idle_since = None
        model.last_used = time.monotonic()
        if keep_alive is not None and not model.entry.pinned:
            model.keep_alive = keep_alive

    def _release(self, model: LoadedModel) -> None:
        with self._lock:
            model.leases -= 1
            self._mark_idle_locked(model)
        self._reap_now()

    def _cancelled(self) -> None:
        if self.on_cancelled is not None:
            self.on_cancelled()

    def _went_idle(self, name: str) -> None:
        """A backend's last running request ended (called on its engine's thread: returns at once)."""
        with self._lock:
            model = self._loaded.get(name)
            if model is not None:
                self._mark_idle_locked(model)
            self._wake.notify_all()

    def _mark_idle_locked(self, model: LoadedModel) -> None:
        if model.idle and model.idle_since is None:
            model.idle_since = time.time()
            self._wake.notify_all()

    # -- loading and unloading -------------------------------------------------------------------

    def _load(self, entry: ModelEntry, loading: _Loading, keep_alive: float | None) -> None:
        try:
            need = self._footprint_of(entry)
            self._make_room(entry, need)
            backend = self._open(entry)
            backend.on_idle = lambda: self._went_idle(entry.name)
            backend.on_cancelled = self._cancelled
        except BaseException as exc:
            with self._lock:
                loading.error = exc
                self._loading.pop(entry.name, None)
            loading.done.set()
            raise
        with self._lock:
            chosen = self.keep_alive if keep_alive is None else keep_alive
            self._loaded[entry.name] = LoadedModel(entry, backend, need, chosen)
            self._loading.pop(entry.name, None)
            loading.backend = backend
        loading.done.set()

    def _make_room(self, entry: ModelEntry, need: int) -> None:
        """Unload idle models, least recently used first, until ``need`` more bytes (and one more
        model) fit; 503 when the room is held by models serving requests."""
        while True:
            with self._lock:
                if self._fits_locked(need):
                    return
                idle = [m for m in self._loaded.values() if m.idle and not m.entry.pinned]
                if not idle:
                    if not self._loaded:
                        return  # a budget smaller than one model still serves that one model
                    raise ApiError(
                        503,
                        f"no room to load {entry.name}: the loaded models "
                        f"({', '.join(sorted(self._loaded))}) are serving requests; retry",
                        code="memory_budget_full",
                    )
                oldest = min(idle, key=lambda m: m.last_used)
                del self._loaded[oldest.entry.name]
            oldest.backend.close()

    def _fits_locked(self, need: int) -> bool:
        loading = len(self._loading) - 1  # other loads in progress count as loaded
        if self.max_loaded is not None and len(self._loaded) + loading + 1 > self.max_loaded:
            return False
        if self.memory_budget is None:
            return True
        used = sum(m.footprint for m in self._loaded.values())
        return used + need <= self.memory_budget

    def unload(self, requested: str) -> bool:
        """Unload ``requested`` now when no request holds it (True: it was loaded and is unloaded)."""
        name = self.entry(requested).name
        with self._lock:
            model = self._loaded.get(name)
            if model is None or model.entry.pinned:
                return False
            if not model.idle:
                model.keep_alive = 0.0  # unloads once its requests end
                return False
            del self._loaded[name]
        model.backend.close()
        return True

    def forget(self, name: str) -> None:
        """Unload ``name`` (its folder is being deleted), waiting for nothing: later requests 404."""
        with self._lock:
            model = self._loaded.pop(name, None)
        if model is not None:
            model.backend.close()

    def _reap_locked(self) -> list[LoadedModel]:
        """Take the idle models whose keep_alive ran out out of the table (the caller closes them)."""
        now = time.time()
        expired = [
            m
            for m in self._loaded.values()
            if m.idle and not m.entry.pinned and (m.expires_at() or math.inf) <= now
        ]
        for model in expired:
            del self._loaded[model.entry.name]
        return expired

    def _reap_now(self) -> None:
        with self._lock:
            expired = self._reap_locked()
        for model in expired:
            model.backend.close()

    def _reap_forever(self) -> None:
        """Unload models as their keep_alive runs out (woken by idleness, else at the next expiry)."""
        while True:
            with self._lock:
                if self._closed:
                    return
                expired = self._reap_locked()
                if not expired:
                    times = [m.expires_at() for m in self._loaded.values() if m.idle]
                    due = min((t for t in times if t is not None), default=None)
                    self._wake.wait(None if due is None else max(0.0, due - time.time()) + 0.01)
                    continue
            for model in expired:
                model.backend.close()

    # -- the end ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ApiError(503, "the server is shutting down", code="server_shutting_down")

    def close(self) -> None:
        """Unload every model (pinned ones too: the server owns what it serves) and stop the reaper."""
        with self._lock:
            self._closed = True
            models = list(self._loaded.values())
            self._loaded.clear()
            self._wake.notify_all()
        for model in models:
            model.backend.close()
        self._reaper.join(5)


def pinned_router(backend: ModelBackend, folder: Path | None = None) -> ModelRouter:
    """A router serving one loaded backend for the server's whole life (``serve(model)``)."""
    folder = folder or backend.model.local_dir
    size = sum(path.stat().st_size for path in folder.iterdir() if path.is_file())
    entry = ModelEntry(backend.model_id, folder, "", size, backend.created, pinned=True)
    return ModelRouter(
        lambda: [],
        _no_loading,
        lambda _entry: 0,
        default=backend.model_id,
        keep_alive=FOREVER,
        pinned=((entry, backend),),
    )


def _no_loading(entry: ModelEntry) -> ModelBackend:
    raise ApiError(404, f"the model {entry.name!r} does not exist on this server", code="model_not_found")
