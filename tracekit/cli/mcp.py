"""``tracekit mcp``: serve tracekit's tools to a coding assistant over stdio (docs/mcp.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ..mcp.access import DEFAULT_MAX_ROWS, DEFAULT_MAX_SECONDS


@click.command("mcp")
@click.option(
    "--root", "roots", multiple=True, type=click.Path(path_type=Path, file_okay=False),
    help="A folder the tools may read (repeat for several); paths outside every root, after symbolic links are "
    "resolved, are refused. Relative paths in tool calls are taken from the first root.  [default: the current folder]",
)
@click.option("--max-seconds", type=click.FloatRange(min=1), default=DEFAULT_MAX_SECONDS, show_default=True,
              help="Longest one tool call may run; past it the call is answered with an error and its work stopped.")
@click.option("--max-rows", type=click.IntRange(min=1), default=DEFAULT_MAX_ROWS, show_default=True,
              help="Most rows one call returns: query rows, listed traces, timeline rows, items of each list of a report.")
@click.option("--no-cache", is_flag=True,
              help="Parse every trace again instead of reading and writing tracekit's parse cache (which lives outside "
              "the roots, in $TRACEKIT_CACHE_DIR or ~/.cache/tracekit).")
def mcp_cmd(roots: tuple[Path, ...], max_seconds: float, max_rows: int, no_cache: bool) -> None:
    """Run a Model Context Protocol server on stdin/stdout for AI coding assistants.

    The assistant starts this command and calls its tools: analyze (the JSON report of a
    trace, a job folder or a folder of jobs), diff (two traces compared), query (read-only
    SQL over the trace's tables), list_traces (the traces and jobs of a folder) and
    timeline (one step's critical path and idle gaps).  Each returns JSON, never prose.

    The tools read only files under the --root folders and write nothing but tracekit's
    parse cache; one call at a time runs, each within --max-seconds and --max-rows, and
    long parses send progress notifications.  Needs the mcp extra:
    pip install 'tracekit-gpu[mcp]'.  Registering it with an assistant: docs/mcp.md.
    """
    from ..mcp import load_server
    from ..mcp.access import Limits, Roots
    from ..mcp.tools import Toolbox

    server_class = load_server()
    toolbox = Toolbox(Roots(list(roots)), Limits(max_seconds=max_seconds, max_rows=max_rows, cache=not no_cache))
    server_class(toolbox).run()


command = mcp_cmd
