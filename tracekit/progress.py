"""Progress of long work: a small observer passed down through reading and analysis.

The headless core reports *what* it is doing; it never draws anything.  A caller that wants
to show progress creates a :class:`Progress` with an ``on_update`` callback and passes it
down (``tracekit.pipeline.load(..., progress=p)`` and ``run(..., progress=p)``, which hand it
to the readers and the analyses):

* :meth:`Progress.phase` starts a named phase (``hashing``, ``reading``, ``decoding``,
  ``caching``, ``steps``, ``idle time``, ``findings``, ``critical path``, ``replay``, ``plan``, ``report``),
  optionally with a total in bytes;
* :meth:`Progress.advance` adds bytes done in the current phase.  The readers count bytes at
  the file-object layer (:mod:`tracekit.parsers._source`), so the count is right whatever
  decoder sits on top; for a gzip file it counts compressed bytes read from disk, against
  the file's size (a file read whole into one buffer reports its bytes in proportion to the
  content the reader has passed).

``on_update`` receives an immutable :class:`ProgressState` snapshot, possibly from a
background thread (the read-ahead thread counts the bytes): renderers must be thread-safe
and cheap.  The command line draws one throttled line on stderr
(:mod:`tracekit.cli._progress`); the TUI's loading screen draws a bar.  Nothing here
imports a terminal library, and there is no global state: without a Progress, nothing is
reported.

>>> seen = []
>>> p = Progress(on_update=seen.append, clock=iter(range(100)).__next__)
>>> p.phase("reading", total=1000)
>>> p.advance(250)
>>> s = seen[-1]
>>> (s.phase, s.done, s.total, s.fraction)
('reading', 250, 1000, 0.25)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressState:
    """Where long work stands: one snapshot, handed to ``on_update``."""

    #: what is being worked on (a file name), or None
    subject: str | None
    #: the current phase, in words ("reading", "critical path", ...)
    phase: str
    #: bytes done in this phase (0 for phases that do not count bytes)
    done: int
    #: bytes the phase will handle, or None when unknown (analysis phases)
    total: int | None
    #: seconds since the Progress was created
    elapsed_s: float
    #: seconds since this phase began
    phase_elapsed_s: float
    #: True once :meth:`Progress.finish` was called
    finished: bool = False

    @property
    def fraction(self) -> float | None:
        """Share of the phase done, in [0, 1], or None without a total."""
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))

    @property
    def rate(self) -> float | None:
        """Bytes per second in this phase, or None when it counts no bytes (yet)."""
        if self.total is None or self.done <= 0 or self.phase_elapsed_s <= 0:
            return None
        return self.done / self.phase_elapsed_s


class Progress:
    """The observer passed down to report progress (see the module docstring).

    Args:
        on_update: called with a :class:`ProgressState` on every change (any thread).
        clock: seconds, monotonic (``time.monotonic`` by default; tests pass their own).
    """

    def __init__(self, on_update: Callable[[ProgressState], None] | None = None, *, clock: Callable[[], float] | None = None) -> None:
        self._on_update = on_update
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._t0 = self._clock()
        self._phase_t0 = self._t0
        self._subject: str | None = None
        self._phase = "starting"
        self._done = 0
        self._total: int | None = None
        self._finished = False

    def subject(self, name: str | None) -> None:
        """Name what is being worked on next (a file name)."""
        with self._lock:
            self._subject = name
        self._emit()

    def phase(self, name: str, total: int | None = None) -> None:
        """Start phase ``name``; ``total`` is the bytes it will handle, when known."""
        with self._lock:
            self._phase, self._total, self._done = name, total, 0
            self._phase_t0 = self._clock()
        self._emit()

    def advance(self, nbytes: int) -> None:
        """Add ``nbytes`` done in the current phase."""
        if nbytes <= 0:
            return
        with self._lock:
            self._done += nbytes
        self._emit()

    def finish(self) -> None:
        """The work is over: renderers clear their line."""
        with self._lock:
            self._finished = True
        self._emit()

    def state(self) -> ProgressState:
        """The current snapshot."""
        with self._lock:
            now = self._clock()
            return ProgressState(
                subject=self._subject, phase=self._phase, done=self._done, total=self._total,
                elapsed_s=now - self._t0, phase_elapsed_s=now - self._phase_t0, finished=self._finished,
            )

    def _emit(self) -> None:
        if self._on_update is not None:
            self._on_update(self.state())


def format_bytes(n: float) -> str:
    """``1.2 GB``, ``412.0 MB``, ``96 kB`` (decimal units, as file managers show sizes)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 1e3:,.0f} kB"


def describe(state: ProgressState) -> str:
    """One line of words for ``state`` (no bar, no colours): what the CLI and the TUI show.

    >>> describe(ProgressState("t.json", "reading", 250_000_000, 1_000_000_000, 5.0, 2.5))
    't.json · reading 250.0 MB of 1.0 GB (25%) · 100.0 MB/s · 5.0 s'
    >>> describe(ProgressState("t.json", "critical path", 0, None, 12.25, 3.0))
    't.json · critical path · 12.2 s'
    """
    parts = [state.subject] if state.subject else []
    what = state.phase
    if state.total:
        what += f" {format_bytes(state.done)} of {format_bytes(state.total)} ({100 * (state.fraction or 0.0):.0f}%)"
    parts.append(what)
    rate = state.rate
    if rate is not None:
        parts.append(f"{format_bytes(rate)}/s")
    parts.append(f"{state.elapsed_s:,.1f} s")
    return " · ".join(parts)


__all__ = ["Progress", "ProgressState", "describe", "format_bytes"]
