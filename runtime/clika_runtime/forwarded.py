"""``Forwarded``: an attribute that reads (and optionally writes) an attribute of one of the owner's parts.

A class that wraps another and shows some of its attributes as its own (an
``Engine`` its ``EngineCore``'s, a ``ChatOutcome`` its report's figures) would
otherwise spell one property per attribute, each ``return self.part.name``::

    class Engine:
        cache = Forwarded[KVCacheManager]("core")  # engine.cache is engine.core.cache

    class RunResult:
        num_turns = Forwarded[int]("loop", "model_calls")  # another name on the part

Like a property without a setter, a forwarded attribute cannot be assigned
unless ``writable``; a class without annotations on it keeps it out of a
dataclass's fields.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Forwarded(Generic[T]):
    """The owner's ``part``'s attribute ``source`` (None: the same name); see the module docstring."""

    def __init__(self, part: str, source: str | None = None, *, writable: bool = False) -> None:
        self._part = part
        self._source = source
        self._writable = writable
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name
        self._source = self._source or name
        self.__doc__ = f"The {self._part.lstrip('_')}'s ``{self._source}``."

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Forwarded[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return getattr(getattr(instance, self._part), self._source)

    def __set__(self, instance: object, value: T) -> None:
        # Defined even when read-only, so that an instance's own attribute can never hide the part's.
        if not self._writable:
            raise AttributeError(f"{type(instance).__name__}.{self._name} is read-only (its {self._part}'s)")
        setattr(getattr(instance, self._part), self._source, value)
