"""Component styles of a widget, looked up once (each lookup builds Textual's caches)."""

from __future__ import annotations

from rich.style import Style
from textual.widget import Widget


class StyleCache:
    """A widget's component styles (from app.tcss) by name, kept until its styles change:
    call :meth:`clear` from the widget's ``notify_style_update``."""

    def __init__(self, widget: Widget) -> None:
        self._widget = widget
        self._styles: dict[tuple[str, bool], Style] = {}

    def get(self, name: str, *, partial: bool = False) -> Style:
        key = (name, partial)
        style = self._styles.get(key)
        if style is None:
            style = self._styles[key] = self._widget.get_component_rich_style(name, partial=partial)
        return style

    def clear(self) -> None:
        self._styles.clear()


__all__ = ["StyleCache"]
