"""The registry: the ordered entries (causes and finding kinds), the critical path's categories and
the GPU's what-if knobs; registration at run time; tables derived from it once per version.

Nothing derived from the registry is frozen at import: :func:`derived` caches a table for the
registry's current :attr:`Registry.version`, and the module-level names of
:mod:`tracekit.analysis.causes` (``CAUSES``, ``CAUSE_LABELS``...) are :class:`LiveSequence` and
:class:`LiveMapping` views that read the current table at each use.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, overload

from .builtins import DEVICE_KNOBS, ENTRIES, PATHS
from .model import Cause, Entry, FindingKind, Knob, PathCause

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
E = TypeVar("E", Cause, FindingKind)


class Registry:
    """The ordered declarations.  Every change bumps :attr:`version`, which keys the derived tables."""

    def __init__(self, entries: Sequence[Entry], paths: Sequence[PathCause], device_knobs: Sequence[Knob]) -> None:
        self._entries: list[Entry] = []
        self._paths: list[PathCause] = list(paths)
        self.device_knobs: tuple[Knob, ...] = tuple(device_knobs)
        self.version = 0
        self._cache: dict[Callable[[], Any], tuple[int, Any]] = {}
        for entry in entries:
            self.add(entry)

    @property
    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries)

    @property
    def paths(self) -> tuple[PathCause, ...]:
        return tuple(self._paths)

    def add(self, entry: Entry, before: str | None = None) -> Entry:
        """Add ``entry`` (before the entry named ``before``, else last); returns it as registered
        (a cause's finding named after the cause).  A bad declaration is a :class:`ValueError`."""
        entry = _completed(entry)
        names = {e.name for e in self._entries}
        if entry.name in names:
            raise ValueError(f"cause registry: {entry.name!r} is already registered")
        if before is not None and before not in names:
            raise ValueError(f"cause registry: cannot register {entry.name!r} before {before!r}: no such entry")
        paths = list(self._paths)
        if isinstance(entry, Cause) and entry.path is not None:
            if entry.path.name in {p.name for p in paths}:
                raise ValueError(f"cause registry: {entry.name!r} brings the path category {entry.path.name!r}, already declared")
            paths.append(entry.path)
        if isinstance(entry, Cause):
            _check_cause(entry, paths, self._knob_names())
        at = len(self._entries) if before is None else [e.name for e in self._entries].index(before)
        self._entries.insert(at, entry)
        self._paths = paths
        self.version += 1
        return entry

    def remove(self, name: str) -> Entry:
        """Remove the entry named ``name`` (and the path category it brought)."""
        for i, entry in enumerate(self._entries):
            if entry.name == name:
                del self._entries[i]
                if isinstance(entry, Cause) and entry.path is not None:
                    self._paths = [p for p in self._paths if p.name != entry.path.name]
                self.version += 1
                return entry
        raise ValueError(f"cause registry: {name!r} is not registered")

    def cached(self, fn: Callable[[], T]) -> T:
        """``fn()`` computed once per registry version."""
        hit = self._cache.get(fn)
        if hit is not None and hit[0] == self.version:
            value: T = hit[1]
            return value
        value = fn()
        self._cache[fn] = (self.version, value)
        return value

    def _knob_names(self) -> set[str]:
        names = {k.name for k in self.device_knobs}
        for e in self._entries:
            if isinstance(e, Cause):
                names.update(k.name for k in knobs_of(e))
        return names


def knobs_of(cause: Cause) -> tuple[Knob, ...]:
    """A cause's ``--what-if`` names: the ones it declares, else (an idle cause) one named after it
    scaling its tags."""
    if cause.knobs:
        return cause.knobs
    if cause.idle and cause.tags:
        return (Knob(cause.name, frozenset(cause.tags), cause.label),)
    return ()


def _completed(entry: Entry) -> Entry:
    """A cause with its finding named after it (priced as that cause at 0 unless it says otherwise)."""
    if not isinstance(entry, Cause) or entry.finding is None:
        return entry
    f = entry.finding
    own_knob = entry.name in {k.name for k in knobs_of(entry)}
    what_if = f.what_if if f.what_if is not None else ({entry.name: 0.0} if own_knob else None)
    return dataclasses.replace(entry, finding=dataclasses.replace(f, name=entry.name, cause=entry.name, what_if=what_if))


def _check_cause(cause: Cause, paths: Sequence[PathCause], knob_names: set[str]) -> None:
    """A cause's tags are some path category's and its knobs are new; its finding's what-if names a knob."""
    where = f"cause registry: {cause.name!r}"
    tags = {t for p in paths for t in p.tags}
    own = set(cause.tags) | {t for k in knobs_of(cause) for t in k.tags}
    unknown = own - tags
    if unknown:
        raise ValueError(f"{where} uses the edge tag(s) {sorted(unknown)} of no path category (declare one with path=PathCause(...))")
    new = [k.name for k in knobs_of(cause)]
    if set(new) & knob_names or len(set(new)) != len(new):
        raise ValueError(f"{where}: a what-if knob named {sorted(set(new) & knob_names) or new} exists already")
    if cause.finding is not None and cause.finding.what_if is not None:
        missing = set(cause.finding.what_if) - knob_names - set(new)
        if missing:
            raise ValueError(f"{where}: its finding's what-if names no knob: {sorted(missing)}")


#: the registry of this process: the built-in vocabulary, and whatever :func:`register` adds
REGISTRY = Registry(ENTRIES, PATHS, DEVICE_KNOBS)


def register(entry: E, *, before: str | None = None) -> E:
    """Add a cause (or a finding kind) to the registry, before the entry named ``before`` (else
    last); returns it as registered.

    Its place is its precedence: the first cause whose detector marks a host instant claims it,
    so a new cause with a detector belongs before the causes that take any other host work
    (``before="launch_bound"``).  The analyses, renderers, TUI and docs tables read the registry
    at each use, so everything after this call knows the cause.
    """
    added = REGISTRY.add(entry, before)
    assert isinstance(added, type(entry))
    return added


def unregister(name: str) -> None:
    """Remove the entry named ``name`` (and the path category it brought)."""
    REGISTRY.remove(name)


@contextmanager
def registered(entry: E, *, before: str | None = None) -> Iterator[E]:
    """:func:`register` for the ``with`` block only (tests): the entry is removed again on exit."""
    added = register(entry, before=before)
    try:
        yield added
    finally:
        unregister(added.name)


def derived(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` (a table derived from the registry) computed once per registry version."""

    @functools.wraps(fn)
    def get() -> T:
        return REGISTRY.cached(fn)

    return get


class LiveSequence(Sequence[T]):
    """A sequence that is whatever ``table()`` returns now (a view of the registry)."""

    def __init__(self, table: Callable[[], Sequence[T]]) -> None:
        self._table = table

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        return self._table()[index]

    def __len__(self) -> int:
        return len(self._table())

    def __iter__(self) -> Iterator[T]:
        return iter(self._table())

    def __contains__(self, item: object) -> bool:
        return item in self._table()

    def __eq__(self, other: object) -> bool:
        return tuple(self._table()) == (tuple(other) if isinstance(other, Sequence) else other)

    def __hash__(self) -> int:
        return hash(tuple(self._table()))

    def __repr__(self) -> str:
        return repr(tuple(self._table()))


class LiveMapping(Mapping[K, V]):
    """A mapping that is whatever ``table()`` returns now (a view of the registry)."""

    def __init__(self, table: Callable[[], Mapping[K, V]]) -> None:
        self._table = table

    def __getitem__(self, key: K) -> V:
        return self._table()[key]

    def __len__(self) -> int:
        return len(self._table())

    def __iter__(self) -> Iterator[K]:
        return iter(self._table())

    def __contains__(self, key: object) -> bool:
        return key in self._table()

    def __repr__(self) -> str:
        return repr(dict(self._table()))
