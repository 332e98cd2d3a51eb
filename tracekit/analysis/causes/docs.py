"""The docs tables generated from the registry (``python scripts/gen_docs.py``)."""

from __future__ import annotations

from .tables import breakdown, findings, idle_causes, knobs, path_causes


def _md_table(head: tuple[str, str], rows: list[tuple[str, str]]) -> str:
    lines = [f"| {head[0]} | {head[1]} |", "|---|---|"]
    lines.extend(f"| {a} | {b} |" for a, b in rows)
    return "\n".join(lines) + "\n"


def idle_causes_markdown() -> str:
    """docs/analysis.md: the idle causes and what the host thread was doing."""
    return _md_table(("cause", "the host thread was in"), [(f"`{c.name}`", c.doc) for c in idle_causes()])


def breakdown_markdown() -> str:
    """docs/json-report.md: the breakdown keys."""
    return _md_table(("key", "label in reports"), [(f"`{c.name}`", c.label) for c in breakdown()])


def finding_kinds_markdown() -> str:
    """docs/json-report.md: every finding kind."""
    return _md_table(("kind", "meaning"), [(f"`{f.name}`", f.doc) for f in findings()])


def path_causes_markdown() -> str:
    """docs/critical-path.md: the critical path's causes."""
    return _md_table(("cause", "made of"), [(f"`{c.name}`", c.doc) for c in path_causes()])


def knobs_markdown() -> str:
    """docs/critical-path.md: the ``--what-if`` names."""
    return _md_table(("cause", "scales"), [(f"`{k.name}`", k.doc) for k in knobs()])


def finding_what_if_markdown() -> str:
    """docs/critical-path.md: the what-if each finding uses."""
    kinds = findings()
    plain = [f.name for f in kinds if f.what_if is not None and not f.what_if_doc]
    rows = [(", ".join(plain), "that cause at 0")]
    rows.extend((f.name, f.what_if_doc) for f in kinds if f.what_if is not None and f.what_if_doc)
    return _md_table(("finding", "what-if"), rows)
