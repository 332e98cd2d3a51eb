"""Messages the TUI's workers and widgets post (typed, so tests can assert on them)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from .model import Focus


@dataclass
class LoadProgress(Message):
    """The loader moved on: ``fraction`` done (0..1) and what it is doing."""

    fraction: float
    text: str

    def can_replace(self, message: Message) -> bool:
        # bursts of progress only need their latest value drawn
        return isinstance(message, LoadProgress)


@dataclass
class OpenTimeline(Message):
    """Ask the app to show the timeline at ``focus``."""

    focus: Focus


__all__ = ["LoadProgress", "OpenTimeline"]
