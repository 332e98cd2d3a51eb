"""The terminal UI's cause colours, generated from :mod:`tracekit.analysis.causes`.

``app.tcss`` holds the layout; the rules that colour a cause (breakdown bars, idle gaps and
critical-path stretches on the timeline, the legend) are generated here, one per declared
cause, so a new cause is coloured without editing the stylesheet.  The colours themselves are
CSS variables (``$cause-<name>``, ``$on-cause``) that ``app.tcss`` may use too.  Both are read
from the registry when an app starts, and :class:`CauseStyled` widgets declare a component
class per cause registered then, so a cause registered at run time is coloured too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from textual.widget import Widget

from ..analysis.causes import BREAKDOWN, BY_NAME, IDLE_CAUSES, PATH, Cause

#: text colour on a light cause background
ON_CAUSE = "#1b1e24"


def cause_variables() -> dict[str, str]:
    """CSS variables: ``cause-<name>`` for every breakdown cause, and ``on-cause``."""
    out = {f"cause-{c.css_name}": c.term_color for c in BREAKDOWN}
    out["on-cause"] = ON_CAUSE
    return out


def _block(cause: Cause) -> str:
    return f"color: {cause.term_text}; background: $cause-{cause.css_name};"


def cause_css() -> str:
    """The stylesheet rules that colour each cause (component classes of the TUI's widgets)."""
    lines = [f"BreakdownChart > .breakdown--{c.name} {{ color: $cause-{c.css_name}; }}" for c in BREAKDOWN]
    lines += [f"TimelineView > .timeline--gap-{n} {{ {_block(BY_NAME[n])} }}" for n in IDLE_CAUSES]
    lines += [f"TimelineView > .timeline--path-{p.name} {{ {_block(BY_NAME[p.colour_of])} text-style: bold; }}" for p in PATH]
    lines += [f"GapLegend > .legend--{n} {{ {_block(BY_NAME[n])} }}" for n in IDLE_CAUSES]
    return "\n".join(lines) + "\n"


class CauseStyled(Widget):
    """A widget with a component class per cause: its fixed ones (``COMPONENT_CLASSES``) and, for
    each ``(prefix, names)`` of :attr:`CAUSE_CLASSES`, ``prefix + name`` for every name
    ``names()`` gives now.

    Textual collects a class's component classes once; the causes' are added at each lookup
    (:meth:`component_classes`) so a cause registered after import is styled too.
    """

    #: (component class prefix, the cause names it is made for)
    CAUSE_CLASSES: ClassVar[tuple[tuple[str, Iterable[str]], ...]] = ()

    @classmethod
    def component_classes(cls) -> frozenset[str]:
        """Every component class of the widget, its causes' included."""
        return super()._get_component_classes() | frozenset(p + n for p, names in cls.CAUSE_CLASSES for n in names)

    @classmethod
    def _get_component_classes(cls) -> frozenset[str]:  # type: ignore[override]
        # textual's hook (its own caches the classes per class, hence the override)
        return cls.component_classes()


__all__ = ["CauseStyled", "cause_css", "cause_variables"]
