"""The progress line of long commands (``analyze``, ``export``, ``diff``, ``annotate``).

One line on stderr, redrawn in place with ``\\r`` a few times a second by a background
thread that reads the :class:`~tracekit.progress.Progress` the core reports to, and cleared
before the command prints its result.  It is drawn only when stderr is a terminal and
``--quiet`` is not given, and only once the work has run for ``TRACEKIT_PROGRESS_DELAY``
seconds (0.5 by default): a cached or small trace never flashes a line.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

from ..progress import Progress, ProgressState, describe

#: seconds of work before the line first appears
DEFAULT_DELAY_S = 0.5
#: seconds between redraws
INTERVAL_S = 0.1
_BAR = 20


def _delay() -> float:
    value = os.environ.get("TRACEKIT_PROGRESS_DELAY")
    if value:
        with contextlib.suppress(ValueError):
            return max(0.0, float(value))
    return DEFAULT_DELAY_S


def render_line(state: ProgressState, width: int) -> str:
    """The text of the line for ``state``, at most ``width - 1`` characters (the cursor stays on the row).

    >>> render_line(ProgressState("t.json", "reading", 500_000_000, 1_000_000_000, 10.0, 5.0), 200)
    'tracekit [==========          ] t.json · reading 500.0 MB of 1.0 GB (50%) · 100.0 MB/s · 10.0 s'
    """
    fraction = state.fraction
    if fraction is not None:
        filled = round(_BAR * fraction)
        text = f"tracekit [{'=' * filled}{' ' * (_BAR - filled)}] {describe(state)}"
    else:
        text = f"tracekit · {describe(state)}"
    limit = max(10, width - 1)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ProgressLine:
    """Draws a Progress on ``stream`` until :meth:`close` (see the module docstring)."""

    def __init__(self, progress: Progress, stream: TextIO, *, delay_s: float = DEFAULT_DELAY_S, interval_s: float = INTERVAL_S) -> None:
        self.progress = progress
        self._stream = stream
        self._delay = delay_s
        self._interval = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._drawn = False
        self._last = ""
        self._thread = threading.Thread(target=self._run, name="tracekit-progress", daemon=True)
        self._thread.start()

    def _width(self) -> int:
        with contextlib.suppress(ValueError):
            columns = int(os.environ.get("COLUMNS", "0"))
            if columns > 0:
                return columns
        try:
            columns = os.get_terminal_size(self._stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            columns = 0
        return columns if columns > 0 else 80  # a terminal that does not know its size

    def _run(self) -> None:
        if self._stop.wait(self._delay):
            return
        while not self._stop.is_set():
            self.draw()
            self._stop.wait(self._interval)

    def draw(self) -> None:
        """Redraw the line now (the thread does it every ``interval_s``)."""
        text = render_line(self.progress.state(), self._width())
        with self._lock:
            if self._stop.is_set() or text == self._last:
                return
            self._write("\r" + text + "\x1b[K")
            self._drawn, self._last = True, text

    def close(self) -> None:
        """Stop redrawing and erase the line (nothing is left on the terminal)."""
        self._stop.set()
        self._thread.join()
        with self._lock:
            if self._drawn:
                self._write("\r\x1b[K")
                self._drawn = False

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.write(text)
            self._stream.flush()


@contextlib.contextmanager
def progress_line(quiet: bool = False, stream: TextIO | None = None) -> Iterator[Progress | None]:
    """A Progress drawn as a line on stderr, or None when quiet or stderr is not a terminal."""
    out = stream or sys.stderr
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        tty = False
    if quiet or not tty:
        yield None
        return
    progress = Progress()
    line = ProgressLine(progress, out, delay_s=_delay())
    try:
        yield progress
    finally:
        progress.finish()
        line.close()


def phase(progress: Progress | None, name: str) -> None:
    """``progress.phase(name)`` when there is a Progress."""
    if progress is not None:
        progress.phase(name)


__all__ = ["DEFAULT_DELAY_S", "ProgressLine", "phase", "progress_line", "render_line"]
