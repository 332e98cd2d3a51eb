"""One error hierarchy for everything tracekit refuses to do.

Every failure a user can cause (a missing file, a file that is not a trace, a corrupt
archive, a bad option) is a :class:`TracekitError`.  The command line and the terminal UI
catch it in exactly one place and print :meth:`TracekitError.render` (one paragraph,
on stderr) instead of a traceback.  Anything else that escapes is a bug in tracekit.
"""

from __future__ import annotations

from pathlib import Path


class TracekitError(Exception):
    """Base class of every error tracekit reports to a user.

    Args:
        message: what went wrong, as one or two sentences.
        path: the file the problem is about, when there is one.
        hint: what the user can do about it.
    """

    #: process exit code used by the CLI for this kind of error
    exit_code: int = 1
    #: short title shown before the message
    title: str = "error"

    def __init__(self, message: str, *, path: str | Path | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = None if path is None else str(path)
        self.hint = hint

    def render(self) -> str:
        """The one-paragraph text shown to the user."""
        where = f"{self.path}: " if self.path else ""
        text = f"tracekit: {self.title}: {where}{self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{where}{self.message}"


class UsageError(TracekitError):
    """The command line or API was called with arguments that cannot work."""

    exit_code = 2
    title = "usage"


class TraceNotFoundError(TracekitError):
    """The input path does not exist or cannot be opened."""

    exit_code = 3
    title = "not found"


class TraceFormatError(TracekitError):
    """The input is not a trace format tracekit reads (or not the one it claims to be)."""

    exit_code = 3
    title = "not a trace"


class TraceCorruptError(TracekitError):
    """The input looks like a supported trace but its bytes are damaged beyond salvage."""

    exit_code = 3
    title = "corrupt trace"


class TraceTooLargeError(TracekitError):
    """Decompressing or reading the input would exceed a safety limit."""

    exit_code = 3
    title = "too large"


class ExternalToolError(TracekitError):
    """An external program tracekit needs (for example ``nsys``) is missing or failed."""

    exit_code = 4
    title = "external tool"


class MissingDependencyError(TracekitError):
    """An optional Python dependency is not installed; the message names the extra."""

    exit_code = 4
    title = "missing dependency"


class AnalysisError(TracekitError):
    """An analysis cannot answer because the trace lacks what it needs."""

    exit_code = 6
    title = "analysis"


class CaptureError(TracekitError):
    """``tracekit capture`` could not start or instrument the user's command."""

    exit_code = 7
    title = "capture"
