"""The first screen: a progress bar while the worker reads and analyses; the error if it fails."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Center, Middle, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Label, ProgressBar, Static


class LoadingScreen(Screen[None]):
    """Shown while the input is read and analysed."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source
        self._fraction, self._text = 0.0, "starting"

    def compose(self) -> ComposeResult:
        with Middle(), Center(), Vertical(id="loading-box"):
            yield Label(f"tracekit · opening {self.source}", id="loading-title")
            yield ProgressBar(total=100, show_eta=False, id="loading-bar")
            yield Label("starting", id="loading-status")
        yield Footer()

    def on_mount(self) -> None:
        self._show()

    def progress(self, fraction: float, text: str) -> None:
        self._fraction, self._text = fraction, text
        if self.is_mounted:
            self._show()

    def _show(self) -> None:
        bars, labels = self.query("#loading-bar").results(ProgressBar), self.query("#loading-status").results(Label)
        for bar in bars:
            bar.update(progress=round(100 * max(0.0, min(self._fraction, 1.0)), 1))
        for label in labels:
            label.update(self._text)


class ErrorScreen(Screen[None]):
    """The input could not be opened: the message, instead of a traceback."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        with Middle(), Center(), Vertical(id="error-box"):
            yield Label("tracekit could not open this input", id="error-title")
            yield Static(self.message, id="error-message", markup=False)
            yield Label("press q to quit", id="error-hint")
        yield Footer()


__all__ = ["ErrorScreen", "LoadingScreen"]
