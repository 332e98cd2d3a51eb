"""``tracekit analyze``: the diagnosis of one trace."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import demo_trace, write_output
from ._progress import phase, progress_line


class _WhatIfOption(click.Option):
    """``--what-if``, whose help lists the cause registry's knobs when help is shown (so
    that starting the CLI does not import the analyses)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from ..analysis.causes import WHAT_IF_CAUSES

        template = self.help
        if template is None or "{causes}" not in template:
            return super().get_help_record(ctx)
        # the knobs registered now (the template stays for the next time help is shown)
        self.help = template.replace("{causes}", ", ".join(WHAT_IF_CAUSES))
        try:
            return super().get_help_record(ctx)
        finally:
            self.help = template


@click.command("analyze")
@click.argument("trace", required=False, type=click.Path(path_type=Path))
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text",
    show_default=True,
    help="Output format: terminal text, the JSON contract (docs/json-report.md), Markdown for a pull request, or "
    "a self-contained HTML page with charts and a timeline (docs/reports.md; to stdout unless --out).",
)
@click.option("--out", "-o", "out", type=click.Path(path_type=Path), help="Write the report to this file instead of stdout.")
@click.option("--image", "image", metavar="URL", help="Markdown only: show this image (e.g. a screenshot of the HTML report).")
@click.option("--no-cache", is_flag=True, help="Parse the file even if a cached copy exists.")
@click.option(
    "--what-if", "what_if", metavar="CAUSE=FACTOR", multiple=True, cls=_WhatIfOption,
    help="Predict the step time with a cause scaled on the critical path (0 removes it, 0.5 halves it); repeat "
    "for several, which are also combined. Causes: {causes} (docs/critical-path.md).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress line on stderr (it is shown only on a terminal anyway).")
def analyze_cmd(
    trace: Path | None, fmt: str, out: Path | None, image: str | None, no_cache: bool, what_if: tuple[str, ...],
    quiet: bool = False,
) -> None:
    """Explain why the GPU is idle in TRACE: steps, utilization, causes, fixes.

    TRACE is a PyTorch profiler trace (.json, .json.gz) or an Nsight Systems export
    (.sqlite, .nsys-rep).  Without TRACE, analyses a sample trace shipped with tracekit.
    TRACE may also be a folder holding the traces of one distributed job (a `tracekit
    capture` folder, or one trace per rank): each rank is diagnosed, and stragglers, load
    imbalance and exposed communication across ranks are reported.  A folder holding the
    traces of several jobs gets one summary per job (JSON: a `tracekit.jobs/1` document).
    """
    from .. import pipeline
    from ..analysis.whatif import what_if_questions
    from ..report import render

    if trace is None:
        trace = demo_trace()
        click.echo("No trace given: analysing tracekit's built-in sample (a training loop with a slow DataLoader).\n", err=True)
    questions = what_if_questions(list(what_if))
    if questions and trace.is_dir():  # refused before the folder is read
        from ..errors import UsageError

        raise UsageError("--what-if answers for one trace", path=trace, hint="analyze one rank's file with --what-if")
    with progress_line(quiet) as progress:
        result = pipeline.run(pipeline.load(trace, cache=not no_cache, progress=progress), what_ifs=questions, progress=progress)
        phase(progress, "report")
        text = render(result, fmt, image=image)
    write_output(text, out)


command = analyze_cmd
