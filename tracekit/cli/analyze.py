"""``tracekit analyze``: the diagnosis of one trace."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import demo_trace, write_output


@click.command("analyze")
@click.argument("trace", required=False, type=click.Path(path_type=Path))
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True,
    help="Output format: terminal text, the JSON contract (docs/json-report.md), or Markdown for a pull request.",
)
@click.option("--out", "-o", "out", type=click.Path(path_type=Path), help="Write the report to this file instead of stdout.")
@click.option("--no-cache", is_flag=True, help="Parse the file even if a cached copy exists.")
def analyze_cmd(trace: Path | None, fmt: str, out: Path | None, no_cache: bool) -> None:
    """Explain why the GPU is idle in TRACE: steps, utilization, causes, fixes.

    TRACE is a PyTorch profiler trace (.json, .json.gz) or an Nsight Systems export
    (.sqlite, .nsys-rep).  Without TRACE, analyses a sample trace shipped with tracekit.
    """
    import json

    from ..analysis import diagnose
    from ..reader import read_trace
    from ..report import render_markdown, render_text, to_json_dict

    if trace is None:
        trace = demo_trace()
        click.echo("No trace given: analysing tracekit's built-in sample (a training loop with a slow DataLoader).\n", err=True)
    tables = read_trace(trace, cache=not no_cache)
    diagnosis = diagnose(tables)
    if fmt == "json":
        text = json.dumps(to_json_dict(diagnosis), indent=2) + "\n"
    elif fmt == "markdown":
        text = render_markdown(diagnosis)
    else:
        text = render_text(diagnosis)
    write_output(text, out)


command = analyze_cmd
