"""``tracekit analyze``: the diagnosis of one trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ._common import demo_trace, write_output
from ._progress import phase, progress_line


class _WhatIfOption(click.Option):
    """``--what-if``, whose help lists the cause registry's knobs when help is shown (so
    that starting the CLI does not import the analyses)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from ..analysis.causes import WHAT_IF_CAUSES

        if self.help is not None and "{causes}" in self.help:
            self.help = self.help.replace("{causes}", ", ".join(WHAT_IF_CAUSES))
        return super().get_help_record(ctx)


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
    import json

    from ..analysis import diagnose
    from ..reading.trace import read_trace
    from ..report import render_markdown, render_text, to_json_dict

    if trace is None:
        trace = demo_trace()
        click.echo("No trace given: analysing tracekit's built-in sample (a training loop with a slow DataLoader).\n", err=True)
    questions = _what_ifs(what_if)
    if trace.is_dir():
        if questions:
            from ..errors import UsageError

            raise UsageError("--what-if answers for one trace", path=trace, hint="analyze one rank's file with --what-if")
        write_output(_analyze_job(trace, fmt, no_cache, quiet), out)
        return
    with progress_line(quiet) as progress:
        if progress is not None:
            progress.subject(trace.name)
        tables = read_trace(trace, cache=not no_cache, progress=progress)
        diagnosis = diagnose(tables, what_if=questions, progress=progress)
        phase(progress, "report")
        if fmt == "json":
            text = json.dumps(to_json_dict(diagnosis), indent=2) + "\n"
        elif fmt in ("markdown", "html"):
            from ..analysis.view import representative_step, step_view
            from ..report.html import render_html

            pick = representative_step(diagnosis.steps)
            d = diagnosis
            view = None if pick is None else step_view(tables, d.steps, d.timeline.gaps, d.syncs, *pick, max_events=6000)
            text = render_html(d, view) if fmt == "html" else render_markdown(d, view=view, image=image)
        else:
            text = render_text(diagnosis)
    write_output(text, out)


def _what_ifs(specs: tuple[str, ...]) -> list[dict[str, float]]:
    """Each ``--what-if CAUSE=FACTOR`` on its own and, when there are several, all together."""
    from ..analysis.whatif import what_if_questions

    return what_if_questions(list(specs))


def _analyze_job(folder: Path, fmt: str, no_cache: bool, quiet: bool = False) -> str:
    """The report of a folder: one job's traces (every rank, and the comparison across ranks), or the
    jobs of a folder that holds several (one summary per job)."""
    import json

    from ..analysis.diagnose import diagnose_job
    from ..reading.job import read_jobs
    from ..report import (
        job_to_json_dict,
        jobs_to_json_dict,
        render_job_html,
        render_job_markdown,
        render_job_text,
        render_jobs_html,
        render_jobs_markdown,
        render_jobs_text,
    )

    with progress_line(quiet) as progress:
        jobs = read_jobs(folder, cache=not no_cache, progress=progress)
        if progress is not None:
            progress.subject(folder.name)
            ranks = sum(len(job.ranks) for job in jobs)
            progress.phase(f"analyzing {ranks} rank{'s' if ranks != 1 else ''}")
        jds = [diagnose_job(job) for job in jobs]
        phase(progress, "report")
        if len(jds) == 1:
            jd = jds[0]
            if fmt == "json":
                return json.dumps(job_to_json_dict(jd), indent=2) + "\n"
            if fmt == "html":
                return render_job_html(jd, _first_rank_view(jd))
            return render_job_markdown(jd) if fmt == "markdown" else render_job_text(jd)
        name, skipped = str(folder), list(jobs[0].skipped)
        if fmt == "json":
            return json.dumps(jobs_to_json_dict(name, jds, skipped), indent=2) + "\n"
        if fmt == "html":
            return render_jobs_html(name, jds, skipped)
        return render_jobs_markdown(name, jds, skipped) if fmt == "markdown" else render_jobs_text(name, jds, skipped)


def _first_rank_view(jd: Any) -> Any:
    """The timeline of the lowest rank's representative step (None when it has no step)."""
    from ..analysis.view import representative_step, step_view

    rank = min(jd.diagnoses)
    d = jd.diagnoses[rank]
    tables = next(r.tables for r in jd.job.ranks if r.rank == rank)
    pick = representative_step(d.steps)
    return None if pick is None else step_view(tables, d.steps, d.timeline.gaps, d.syncs, *pick, max_events=6000)


command = analyze_cmd
