"""``tracekit mcp``: a Model Context Protocol server, so coding assistants can ask tracekit.

An assistant starts ``tracekit mcp`` and talks to it over stdin/stdout; the tools (analyze,
diff, query, list_traces, timeline) return pieces of the JSON contract (docs/json-report.md),
not prose, and read only under the root folders given at start (docs/mcp.md).

* :mod:`.access`: the roots and the per-call limits;
* :mod:`.tools` (with :mod:`.tables`, :mod:`.timeline`, :mod:`.listing`): the tools as plain
  functions over the pipeline, without the SDK;
* :mod:`.server`: the tools served with the ``mcp`` SDK, the only module that imports it.

The SDK is an optional extra: :func:`load_server` imports it and names the extra when it is
missing.  The headless core never imports this package (an import-linter contract).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import MissingDependencyError

if TYPE_CHECKING:
    from .server import TracekitServer

#: the distribution name, as ``pip install`` takes it
DISTRIBUTION = "tracekit-gpu"


def load_server() -> type[TracekitServer]:
    """The server class, or MissingDependencyError naming the extra to install."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            "the MCP server needs the mcp package (the Model Context Protocol SDK), which is not installed",
            hint=f"pip install '{DISTRIBUTION}[mcp]'",
        ) from exc
    from .server import TracekitServer

    return TracekitServer


__all__ = ["DISTRIBUTION", "load_server"]
