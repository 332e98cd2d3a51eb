"""One marked section of docs/performance.md, rewritten by a benchmark script.

Each benchmark owns a section between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``;
:func:`write_section` replaces what is between the markers (or appends the section when the
page has none), leaving the rest of the page as it is.
"""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def write_section(name: str, body: str, doc: Path = DOC) -> None:
    start, end = markers(name)
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Performance\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text, encoding="utf-8")
