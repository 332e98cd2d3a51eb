"""What the MCP server may read: the root folders given when it starts, and the per-call limits.

Every path a tool is given goes through :meth:`Roots.resolve` before anything opens it: the
path is made absolute (a relative path is taken from the first root), symbolic links are
resolved, and the result must lie inside one of the roots.  A folder is also checked file by
file, since a symbolic link inside a root may point outside it.  Anything else is refused with
a :class:`~tracekit.errors.UsageError` naming the path and the roots.

This module imports neither the MCP SDK nor a front end: it is tested on its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceNotFoundError, UsageError

#: seconds one tool call may run before it is answered with an error
DEFAULT_MAX_SECONDS = 300.0
#: rows one tool call returns at most (query results, listed traces, timeline segments, lists of a report)
DEFAULT_MAX_ROWS = 500


@dataclass(frozen=True)
class Limits:
    """Caps on the work of one tool call."""

    max_seconds: float = DEFAULT_MAX_SECONDS
    max_rows: int = DEFAULT_MAX_ROWS
    #: read and write tracekit's parse cache (it lives outside the roots, see tracekit.reading.cache)
    cache: bool = True

    def rows(self, asked: int | None) -> int:
        """The row cap of a call that asked for ``asked`` rows (never above :attr:`max_rows`)."""
        if asked is None:
            return self.max_rows
        if asked < 1:
            raise UsageError(f"limit must be at least 1, got {asked}")
        return min(asked, self.max_rows)


class Roots:
    """The folders the server reads, each resolved once at start."""

    def __init__(self, folders: Sequence[str | os.PathLike[str]]) -> None:
        resolved: list[Path] = []
        for folder in folders or [Path.cwd()]:
            path = Path(folder).expanduser()
            if not path.is_dir():
                raise UsageError("a root must be an existing folder", path=path, hint="tracekit mcp --root DIR [--root DIR ...]")
            real = path.resolve()
            if real not in resolved:
                resolved.append(real)
        self.folders: tuple[Path, ...] = tuple(resolved)

    def describe(self) -> str:
        return ", ".join(str(f) for f in self.folders)

    def contains(self, real: Path) -> bool:
        return any(real == root or real.is_relative_to(root) for root in self.folders)

    def resolve(self, path: str | os.PathLike[str], *, folder_files: bool = True) -> Path:
        """The real path of ``path`` once it is known to lie inside a root.

        ``folder_files``: for a folder, also check each trace file directly in it (what
        :func:`tracekit.pipeline.load` reads).

        Raises:
            tracekit.errors.UsageError: the path, or a trace file of the folder, lies outside every root.
            tracekit.errors.TraceNotFoundError: nothing exists at the path.
        """
        text = os.fspath(path)
        if not text.strip():
            raise UsageError("empty path", hint=f"give a trace file or folder under {self.describe()}")
        given = Path(text).expanduser()
        absolute = given if given.is_absolute() else self.folders[0] / given
        real = absolute.resolve()
        if not self.contains(real):
            raise self.refusal(text)
        if not real.exists():
            raise TraceNotFoundError("no such file or folder", path=text)
        if folder_files and real.is_dir():
            outside = [p.name for p in self._trace_files(real) if not self.contains(p.resolve())]
            if outside:
                raise UsageError(
                    f"the folder's trace files {', '.join(outside[:3])} are links to files outside the folders this server "
                    f"may read ({self.describe()})",
                    path=text,
                    hint="start the server with `tracekit mcp --root DIR` for the folder they point to",
                )
        return real

    def refusal(self, text: str) -> UsageError:
        return UsageError(
            f"outside the folders this server may read ({self.describe()})",
            path=text,
            hint="give a path under one of them, or start the server with `tracekit mcp --root DIR` for that folder",
        )

    @staticmethod
    def _trace_files(folder: Path) -> Iterable[Path]:
        from ..reading.job import is_trace_name

        try:
            entries = list(folder.iterdir())
        except OSError as exc:
            raise TraceNotFoundError(f"cannot list the folder: {exc.strerror or exc}", path=folder) from exc
        return (p for p in entries if is_trace_name(p.name))


__all__ = ["DEFAULT_MAX_ROWS", "DEFAULT_MAX_SECONDS", "Limits", "Roots"]
