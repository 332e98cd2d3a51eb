"""``tracekit tui``: browse a diagnosis in the terminal (over SSH, no browser needed)."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import demo_trace


@click.command("tui")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--no-cache", is_flag=True, help="Parse trace files even if a cached copy exists.")
def tui_cmd(path: Path | None, no_cache: bool) -> int:
    """Explore PATH in a terminal UI: findings, step timeline, idle gaps, sync points, kernels.

    PATH is a trace file (.json, .json.gz, .sqlite, .nsys-rep), a capture folder
    (metadata.json and rank*.pt.trace.json.gz files) or a batch output folder
    (traces.parquet, findings.parquet, jobs.parquet).  Without PATH, opens a sample trace
    shipped with tracekit.  Keys: 1 overview, 2 timeline, 3 tables, ? help, q quit;
    Ctrl+P lists every action.
    """
    from ..errors import TracekitError
    from ..tui.loader import detect_input

    if path is None:
        path = demo_trace()
    # a missing path or an unknown folder is reported here, before the terminal is taken over
    detect_input(path)
    from ..tui.app import make_app

    app = make_app(path, cache=not no_cache)
    app.run()
    if isinstance(app.error, TracekitError):
        click.echo(app.error.render(), err=True)
    elif app.error is not None:
        click.echo(f"tracekit: internal error: {type(app.error).__name__}: {app.error}", err=True)
    return app.return_code_for_exit


command = tui_cmd
