"""The terminal UI (``tracekit tui``): browse a diagnosis where no browser is at hand.

The TUI only renders analysis results: it imports the headless core (reader, analyses,
report helpers) and nothing in the core imports it.  :func:`make_app` builds the
:class:`~textual.app.App` without running it; :mod:`tracekit.tui.loader` reads a trace file,
a capture folder or a batch output into a :class:`~tracekit.tui.session.Session`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import TracekitApp, make_app


def __getattr__(name: str) -> Any:
    if name in ("make_app", "TracekitApp"):
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module 'tracekit.tui' has no attribute {name!r}")


__all__ = ["TracekitApp", "make_app"]
