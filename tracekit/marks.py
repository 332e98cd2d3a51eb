"""Explicit marks for users who want to say where a step or a phase is.

>>> import tracekit
>>> with tracekit.step():                      # one training step
...     with tracekit.range("augment"):        # a named range inside it
...         pass
>>> @tracekit.range("evaluate")
... def evaluate():
...     return 1
>>> evaluate()
1

Under ``tracekit capture`` these become NVTX ranges (domain ``tracekit``) and, while the torch
profiler records, ``record_function`` ranges; steps marked with :func:`step` replace the
optimizer-step rule for numbering steps.  Without a capture they do nothing and cost about as
much as an empty ``with`` block (this module imports neither torch nor anything else).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Session(Protocol):
    """What the marks need of a capture session (:class:`tracekit.capture.session.Session`
    has it): user ranges and user steps."""

    def user_range(self, name: str) -> Any: ...
    def end(self, handle: Any) -> None: ...
    def user_step_begin(self) -> bool: ...
    def user_step_end(self, began: bool) -> None: ...

#: the capture session of this process (set by tracekit.capture.runtime), None when inactive
_SESSION: Session | None = None
#: whether this process was started by ``tracekit capture`` (a session may appear later,
#: when torch is imported)
_REQUESTED = bool(os.environ.get("TRACEKIT_CAPTURE"))


def _set_session(session: Session | None) -> None:
    global _SESSION
    _SESSION = session


class _Inactive:
    """What :func:`range` and :func:`step` return when no capture can become active."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def __call__(self, fn: F) -> F:
        return fn


_INACTIVE = _Inactive()


class _Range:
    """A named range: context manager and decorator; looks the session up when entered."""

    __slots__ = ("_handles", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._handles: list[Any] = []

    def __enter__(self) -> None:
        session = _SESSION
        self._handles.append(None if session is None else session.user_range(self.name))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        handle = self._handles.pop() if self._handles else None
        session = _SESSION
        if handle is not None and session is not None:
            session.end(handle)

    def __call__(self, fn: F) -> F:
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _SESSION is None:
                return fn(*args, **kwargs)
            with _Range(name):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class _Step:
    """One explicit training step (see :func:`step`)."""

    __slots__ = ("_began",)

    def __init__(self) -> None:
        self._began: list[tuple[Session | None, bool]] = []

    def __enter__(self) -> None:
        session = _SESSION
        self._began.append((session, session.user_step_begin() if session is not None else False))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        session, began = self._began.pop() if self._began else (None, False)
        if session is not None:
            session.user_step_end(began)

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _SESSION is None:
                return fn(*args, **kwargs)
            with _Step():
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def range(name: str) -> Any:
    """A named range, as a context manager (``with tracekit.range("augment"):``) or a decorator
    (``@tracekit.range("evaluate")``).  A no-op unless the process runs under ``tracekit capture``."""
    if _SESSION is None and not _REQUESTED:
        return _INACTIVE
    return _Range(str(name))


def step() -> Any:
    """Marks one training step: ``with tracekit.step(): ...`` around the body of the training
    loop (or ``@tracekit.step()`` on the function that runs one step).  Once used, these marks
    number the steps instead of the optimizer's ``step()`` calls.  A no-op without a capture."""
    if _SESSION is None and not _REQUESTED:
        return _INACTIVE
    return _Step()


__all__ = ["range", "step"]
