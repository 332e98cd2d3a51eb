"""What every screen of the app shares: access to the loaded session and the selection.

The screens reach the app through :class:`SessionHost`, the few things they ask of it, so that
they need not import the app (which imports every screen).
"""

from __future__ import annotations

from typing import ClassVar, Protocol, cast

from textual.screen import Screen

from ..bindings import KeySpec
from ..model import Focus
from ..session import LoadedTrace, Session


class SessionHost(Protocol):
    """What a screen asks of the app (:class:`tracekit.tui.app.TracekitApp` provides it)."""

    #: (trace index, rank) shown by the overview and tables
    current: tuple[int, int]

    @property
    def session(self) -> Session: ...

    @property
    def trace(self) -> LoadedTrace: ...

    @property
    def rank(self) -> int: ...

    def where(self) -> str:
        """Which trace and rank the overview shows, when the input has several."""
        ...

    def choice_for_rank(self, rank: int, prefer: int) -> tuple[int, int] | None:
        """The (trace, rank) choice for ``rank``, preferring trace ``prefer``."""
        ...

    def open_batch_trace(self, path: str) -> None:
        """Open one trace of a batch output and show its overview."""
        ...

    def show_focus(self, focus: Focus | None) -> None:
        """Switch to the timeline at ``focus``."""
        ...


class SessionScreen(Screen[None]):
    """A screen that shows part of the loaded session."""

    #: the screen's own key table (listed in the command palette)
    SPECS: ClassVar[tuple[KeySpec, ...]] = ()

    @property
    def tk(self) -> SessionHost:
        return cast("SessionHost", self.app)

    def selection_changed(self) -> None:
        """The rank or trace shown changed; redraw what depends on it."""


__all__ = ["SessionHost", "SessionScreen"]
