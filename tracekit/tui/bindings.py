"""Every key binding of the TUI, as data.

Screens and widgets build their ``BINDINGS`` from these tables, the help screen lists them,
and the command palette offers one entry per action — so a key is declared in exactly one
place and the three can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class KeySpec:
    """One action and the keys that run it."""

    #: Textual key names, comma separated ("plus,equals_sign")
    keys: str
    #: the action method without its ``action_`` prefix, with arguments if any
    action: str
    #: what it does, in a few words (footer, help screen, command palette)
    description: str
    #: show in the footer
    show: bool = True
    #: the key as printed on the help screen (defaults to ``keys``)
    display: str | None = None

    @property
    def shown_keys(self) -> str:
        return self.display or self.keys.replace(",", " / ")


#: every screen
GLOBAL = (
    KeySpec("1", "app.show_overview", "Overview"),
    KeySpec("2", "app.show_timeline", "Timeline"),
    KeySpec("3", "app.show_tables", "Tables"),
    KeySpec("4", "app.show_batch", "Batch traces"),
    KeySpec("5", "app.show_job", "Job (rank lanes)", show=False),
    KeySpec("r", "app.cycle_rank(1)", "Next rank", show=False),
    KeySpec("R", "app.cycle_rank(-1)", "Previous rank", show=False),
    KeySpec("question_mark,f1", "app.help", "Help", display="? / F1"),
    KeySpec("q", "app.quit", "Quit"),
)

OVERVIEW = (
    KeySpec("enter", "open_finding", "Finding detail", display="Enter"),
    KeySpec("t", "finding_timeline", "Finding on timeline"),
)

FINDING = (
    KeySpec("t", "timeline", "Show on timeline"),
    KeySpec("escape,backspace", "back", "Back", display="Esc"),
)

TIMELINE = (
    KeySpec("plus,equals_sign", "zoom(0.5)", "Zoom in", display="+ / ="),
    KeySpec("minus,underscore", "zoom(2.0)", "Zoom out", display="-"),
    KeySpec("0", "fit", "Fit step", show=False),
    KeySpec("shift+left,h", "pan(-0.25)", "Pan left", show=False, display="Shift+← / h"),
    KeySpec("shift+right,l", "pan(0.25)", "Pan right", show=False, display="Shift+→ / l"),
    KeySpec("left", "select_event(-1)", "Previous event", show=False, display="←"),
    KeySpec("right", "select_event(1)", "Next event", show=False, display="→"),
    KeySpec("up", "select_row(-1)", "Row up", show=False, display="↑"),
    KeySpec("down", "select_row(1)", "Row down", show=False, display="↓"),
    KeySpec("n", "next_gap(1)", "Next gap"),
    KeySpec("N", "next_gap(-1)", "Previous gap", show=False),
    KeySpec("f,enter", "follow", "Follow link", display="f / Enter"),
    KeySpec("comma", "step(-1)", "Previous step", show=False, display=","),
    KeySpec("full_stop", "step(1)", "Next step", display="."),
    KeySpec("s", "pick_step", "Go to step"),
    KeySpec("d", "cycle_depth", "Nesting depth", show=False),
    KeySpec("c", "toggle_path", "Critical path", show=False),
)

TABLES = (
    KeySpec("slash", "search", "Filter", display="/"),
    KeySpec("escape", "clear_search", "Clear filter", show=False, display="Esc"),
    KeySpec("left_square_bracket", "tab(-1)", "Previous table", show=False, display="["),
    KeySpec("right_square_bracket", "tab(1)", "Next table", show=False, display="]"),
)

BATCH = (
    KeySpec("slash", "search", "Filter", display="/"),
)

#: the table widget's own keys (it has focus on the tables and overview screens)
FRAME_TABLE = (
    KeySpec("up", "cursor(-1)", "Up", show=False, display="↑"),
    KeySpec("down", "cursor(1)", "Down", show=False, display="↓"),
    KeySpec("pageup", "page(-1)", "Page up", show=False, display="PgUp"),
    KeySpec("pagedown", "page(1)", "Page down", show=False, display="PgDn"),
    KeySpec("home", "edge(-1)", "First row", show=False, display="Home"),
    KeySpec("end", "edge(1)", "Last row", show=False, display="End"),
    KeySpec("left", "column(-1)", "Column left", show=False, display="←"),
    KeySpec("right", "column(1)", "Column right", show=False, display="→"),
    KeySpec("s", "sort", "Sort by column"),
    KeySpec("enter", "choose", "Open", show=False, display="Enter"),
)

#: (title, specs) groups in the order the help screen lists them
GROUPS: tuple[tuple[str, tuple[KeySpec, ...]], ...] = (
    ("Everywhere", GLOBAL),
    ("Overview", OVERVIEW),
    ("Finding detail", FINDING),
    ("Timeline", TIMELINE),
    ("Tables", TABLES),
    ("Batch traces (batch outputs)", BATCH),
    ("Any table", FRAME_TABLE),
)


def bindings(specs: tuple[KeySpec, ...]) -> list[Binding]:
    """Textual bindings for a table of key specs."""
    return [Binding(s.keys, s.action, s.description, show=s.show) for s in specs]


__all__ = ["BATCH", "FINDING", "FRAME_TABLE", "GLOBAL", "GROUPS", "OVERVIEW", "TABLES", "TIMELINE", "KeySpec", "bindings"]
