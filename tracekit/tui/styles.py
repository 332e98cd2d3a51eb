"""The terminal UI's cause colours, generated from :mod:`tracekit.analysis.causes`.

``app.tcss`` holds the layout; the rules that colour a cause (breakdown bars, idle gaps and
critical-path stretches on the timeline, the legend) are generated here, one per declared
cause, so a new cause is coloured without editing the stylesheet.  The colours themselves are
CSS variables (``$cause-<name>``, ``$on-cause``) that ``app.tcss`` may use too.
"""

from __future__ import annotations

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


__all__ = ["cause_css", "cause_variables"]
