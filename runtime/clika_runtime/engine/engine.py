"""The engine's threaded driver: ``EngineCore.step()`` on its own thread; submit, stream and cancel
from any thread.

Other threads post requests and commands to an inbox; the engine thread takes
them between steps and runs the core's steps while it has work (the core's
docstring has what one step does). Each request's deltas go to its
``RequestStream``, a queue the caller drains on its own thread, so a slow
reader never stalls the model.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.core import EngineCore, StepRunner
from clika_runtime.engine.errors import EngineClosedError, QueueFullError
from clika_runtime.engine.kv.kv_cache import KVCacheManager
from clika_runtime.engine.load import EngineLoad
from clika_runtime.engine.options import EngineOptions
from clika_runtime.engine.output import Delta
from clika_runtime.engine.prompt_media import PromptMedia
from clika_runtime.engine.request_stream import RequestStream
from clika_runtime.engine.sampler import Sampler
from clika_runtime.engine.scheduler import Scheduler
from clika_runtime.engine.sequence import Request
from clika_runtime.engine.sequence import Sequence as Seq
from clika_runtime.engine.stage_record import EngineStats
from clika_runtime.engine.stages import StageObserver
from clika_runtime.forwarded import Forwarded
from clika_runtime.text.tokenizer import Tokenizer

__all__ = ["Delta", "Engine", "EngineLoad", "EngineOptions", "EngineStats", "RequestStream"]

T = TypeVar("T")


class Engine:
    """An ``EngineCore`` driven on the engine's own thread (see the module docstring)."""

    def __init__(self, core: EngineCore, *, name: str = "clika-engine") -> None:
        self.core = core
        # One kind of message: work for the engine thread to run between steps, in posting order.
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._stopping = False
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._posted = 0  # submissions in the inbox, not yet queued by the scheduler
        self._waiting = 0  # the scheduler's queue length, as last seen
        self._max_queued = self.core.options.max_queued
        self._closed = False
        self._load = EngineLoad.read(self.core)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # -- the core's parts, for callers that read them ------------------------------------

    options = Forwarded[EngineOptions]("core")
    executor = Forwarded[StepRunner]("core")
    cache = Forwarded[KVCacheManager]("core")
    scheduler = Forwarded[Scheduler]("core")
    tokenizer = Forwarded[Tokenizer | None]("core")
    stats = Forwarded[EngineStats]("core")
    sampler = Forwarded[Sampler]("core")
    max_seq = Forwarded[int]("core")
    observer = Forwarded[StageObserver | None]("core", writable=True)

    # -- any thread ------------------------------------------------------------------

    def new_request_id(self) -> int:
        return next(self._ids)

    def submit(
        self,
        prompt_ids: Sequence[int],
        config: GenerationConfig,
        *,
        request_id: int | None = None,
        skip_special_tokens: bool = True,
        detokenize: bool = True,
        media: PromptMedia | None = None,
    ) -> RequestStream:
        """Queue a request; its stream yields the reply. Bad input raises ValueError, a full queue
        QueueFullError. ``media``: embeddings for the prompt's media positions (``prompt_media``)."""
        prompt = self.core.check_request(prompt_ids, config, media)
        rid = self.new_request_id() if request_id is None else request_id
        request = Request(rid, prompt, config, self.core.eos_token_ids, media=media)
        stream = RequestStream(self, rid)
        decoder = self.core.decoder_for(
            prompt, config, skip_special_tokens=skip_special_tokens, detokenize=detokenize
        )
        grammar = self.core.grammar_for(config)  # built here: a large vocabulary takes a second once
        with self._lock:
            if self._closed:
                raise EngineClosedError("the engine is closed; it takes no more requests")
            if self._posted + self._waiting >= self._max_queued + self._load.free_slots:
                raise QueueFullError(
                    f"the request queue is full ({self._max_queued} waiting); retry once some finish"
                )
            self._posted += 1
            self._inbox.put(lambda: self._add(request, stream, decoder, grammar))
        return stream

    def cancel(self, request_id: int) -> None:
        """Cancel a request (waiting or running) at the next step; unknown or ended ids are ignored."""
        self._inbox.put(lambda: self.core.cancel(request_id))

    def set_max_active(self, max_active: int) -> None:
        """Let ``max_active`` sequences decode together from the next step on (the cache grows its
        slots when needed; a lower cap lets running sequences finish and admits fewer)."""
        if isinstance(max_active, bool) or not isinstance(max_active, int) or max_active < 1:
            raise ValueError(f"max_active must be an integer >= 1, got {max_active!r}")
        self._inbox.put(lambda: self.core.set_max_active(max_active))

    def raise_limits(self, *, max_active: int | None = None, max_queued: int | None = None) -> None:
        """Raise the engine's limits (never lowers them): ``max_active`` decoding together,
        ``max_queued`` waiting beyond them."""
        if max_queued is not None:
            if isinstance(max_queued, bool) or not isinstance(max_queued, int) or max_queued < 0:
                raise ValueError(f"max_queued must be an integer >= 0, got {max_queued!r}")
            with self._lock:
                raised = max_queued > self._max_queued
                if raised:
                    self._max_queued = max_queued
            if raised:
                self._inbox.put(lambda: setattr(self.core.scheduler, "max_queued", max_queued))
        if max_active is not None and max_active > self.max_active:
            self.set_max_active(max_active)

    def check_integrity(self, timeout: float | None = 60.0) -> None:
        """Check the engine's bookkeeping on its own thread (between steps); AssertionError when it drifted."""
        done: Future[None] = Future()
        self._inbox.put(lambda: self._check(done))
        done.result(timeout)

    def between_steps(self, work: Callable[[EngineCore], T], timeout: float | None = 60.0) -> T:
        """``work(core)`` on the engine's thread between two steps (where the KV cache may be read
        and written); its result, or its exception. EngineClosedError once the engine is closed."""
        done: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise EngineClosedError("the engine is closed")
            self._inbox.put(lambda: self._call(work, done))
        return done.result(timeout)

    def close(self) -> None:
        """Cancel everything and stop the engine's thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._inbox.put(self._stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self.core.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_active(self) -> int:
        return self.core.scheduler.max_active

    @property
    def load(self) -> EngineLoad:
        """Requests running and waiting, KV use and step totals as of the last step or command."""
        return self._load

    # -- the engine thread -------------------------------------------------------------

    def _loop(self) -> None:
        core = self.core
        while self._drain(block=not core.has_work):
            if not core.has_work:
                continue
            try:
                plan = core.step()
                self._publish_load()
                if plan is None and not self._drain(block=True):
                    break  # nothing could be scheduled, then the engine was closed while waiting
            except Exception as exc:  # a failed step ends its requests, not the engine
                core.fail_all(f"{type(exc).__name__}: {exc}")
                self._publish_load()
        core.cancel_all()

    def _drain(self, *, block: bool) -> bool:
        """Apply posted commands; False once the engine must stop."""
        if block:
            self.core.deliver_pending()
            item = self._inbox.get()
        elif self._inbox.empty():  # the usual case between steps: no exception raised and caught
            return True
        else:
            item = self._inbox.get_nowait()  # this thread alone takes from the inbox: never empty here
        while True:
            item()
            if self._stopping:
                return False  # nothing posted after the stop runs (close refuses new work first)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                self._publish_load()
                return True

    def _stop(self) -> None:
        self._stopping = True

    def _add(self, request: Request, stream: RequestStream, decoder: Any, grammar: Any) -> None:
        with self._lock:
            self._posted -= 1
            self._waiting += 1
        self.core.add(Seq(request), stream, decoder, grammar)

    def _check(self, done: Future[None]) -> None:
        try:
            self.core.check_integrity()
        except AssertionError as exc:
            done.set_exception(exc)
        else:
            done.set_result(None)

    def _call(self, work: Callable[[EngineCore], Any], done: Future[Any]) -> None:
        try:
            result = work(self.core)
        except Exception as exc:  # the caller's problem, raised on its thread
            done.set_exception(exc)
        else:
            done.set_result(result)

    def _publish_load(self) -> None:
        """Publish the engine's load: what readers see, and what ``submit`` checks a new request against."""
        load = EngineLoad.read(self.core)
        with self._lock:  # submit reads the queue length and the free slots as one pair
            self._waiting = load.waiting
            self._load = load
