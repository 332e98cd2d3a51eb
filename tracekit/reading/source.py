"""The user's source lines, for the code locations of findings.

A finding located in the user's code (:class:`tracekit.analysis.codeloc.CodeLocation`) shows
the line's text when the file can be read.  Only files under the trace's folder or the current
folder are read (a trace names paths on the machine it came from; tracekit reads nothing else
of this one), only Python sources, and each file once.

Example::

    >>> lines = SourceLines(["."])
    >>> lines("tracekit/reading/source.py", 1)
    '\"\"\"The user\\'s source lines, for the code locations of findings.'
    >>> lines("/etc/passwd", 1) is None
    True
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

#: larger files are not read (a source line of a generated module is not worth it)
MAX_SOURCE_BYTES = 4 * 2**20
#: longest line text kept
MAX_LINE_CHARS = 200


class SourceLines:
    """``(file, line) -> text`` (stripped) for Python files under ``roots``; None otherwise.

    A relative ``file`` is looked up under each root in turn; an absolute one is read only when
    it lies under a root.
    """

    def __init__(self, roots: Iterable[str | os.PathLike[str]]) -> None:
        seen: list[Path] = []
        for r in roots:
            try:
                p = Path(r).resolve()
            except OSError:
                continue
            if p not in seen:
                seen.append(p)
        self._roots = tuple(seen)
        self._files: dict[str, list[str] | None] = {}

    @classmethod
    def near(cls, paths: Iterable[str | os.PathLike[str]]) -> SourceLines:
        """For traces at ``paths``: their folders, then the current folder."""
        roots = [Path(p).parent if not Path(p).is_dir() else Path(p) for p in paths]
        return cls([*roots, Path.cwd()])

    def _path(self, file: str) -> Path | None:
        if not file.endswith(".py"):
            return None
        given = Path(file)
        candidates = [given] if given.is_absolute() else [root / given for root in self._roots]
        for c in candidates:
            try:
                real = c.resolve()
            except OSError:
                continue
            if any(real.is_relative_to(root) for root in self._roots) and real.is_file():
                return real
        return None

    def _lines(self, file: str) -> list[str] | None:
        if file not in self._files:
            text = None
            path = self._path(file)
            try:
                if path is not None and path.stat().st_size <= MAX_SOURCE_BYTES:
                    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                text = None
            self._files[file] = text
        return self._files[file]

    def __call__(self, file: str, line: int) -> str | None:
        lines = self._lines(file)
        if lines is None or not 1 <= line <= len(lines):
            return None
        text = lines[line - 1].strip()
        return text[:MAX_LINE_CHARS] or None


__all__ = ["MAX_LINE_CHARS", "MAX_SOURCE_BYTES", "SourceLines"]
