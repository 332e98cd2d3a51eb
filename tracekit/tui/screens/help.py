"""The key bindings, listed from the same tables that declare them."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from ..bindings import GROUPS


def help_table() -> Table:
    """Every group of key bindings as a two-column table."""
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0), expand=False)
    table.add_column("keys", style="bold", no_wrap=True)
    table.add_column("action")
    for title, specs in GROUPS:
        table.add_row(f"[u]{title}[/u]", "")
        for spec in specs:
            table.add_row(spec.shown_keys, spec.description)
        table.add_row("", "")
    table.add_row("Ctrl+P", "command palette (every action by name)")
    table.add_row("mouse", "timeline: wheel zooms, drag pans, click selects; tables: click a header to sort")
    return table


class HelpScreen(ModalScreen[None]):
    """Key bindings of every screen."""

    BINDINGS: ClassVar[list[BindingType]] = [
        ("escape,q,question_mark,f1", "close", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Label("tracekit · keys", id="help-title")
            yield Static(help_table(), id="help-keys")

    def action_close(self) -> None:
        self.dismiss(None)


__all__ = ["HelpScreen", "help_table"]
