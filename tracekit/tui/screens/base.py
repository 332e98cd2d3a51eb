"""What every screen of the app shares: access to the loaded session and the selection."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

from textual.screen import Screen

from ..bindings import KeySpec

if TYPE_CHECKING:
    from ..app import TracekitApp


class SessionScreen(Screen[None]):
    """A screen that shows part of the loaded session."""

    #: the screen's own key table (listed in the command palette)
    SPECS: ClassVar[tuple[KeySpec, ...]] = ()

    @property
    def tk(self) -> TracekitApp:
        return cast("TracekitApp", self.app)

    def selection_changed(self) -> None:
        """The rank or trace shown changed; redraw what depends on it."""


__all__ = ["SessionScreen"]
