"""``tracekit annotate``: the trace with its critical path and findings drawn in, for Perfetto."""

from __future__ import annotations

from pathlib import Path

import click

from ._progress import phase, progress_line


@click.command("annotate")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option(
    "--out", "-o", "out", type=click.Path(path_type=Path), required=True,
    help="The annotated Chrome trace to write (.json, or .json.gz to compress).",
)
@click.option("--rank", type=int, default=None, help="Only this rank (default: every rank).")
@click.option("--step", type=int, default=None, help="Only this step window (default: every step).")
@click.option("--critical-only", is_flag=True, help="Keep only the events on the critical path (and the step ranges).")
@click.option("--no-cache", is_flag=True, help="Parse the file even if a cached copy exists.")
@click.option("--quiet", "-q", is_flag=True, help="No progress line on stderr (it is shown only on a terminal anyway).")
def annotate_cmd(
    trace: Path, out: Path, rank: int | None, step: int | None, critical_only: bool, no_cache: bool, quiet: bool = False
) -> None:
    """Write TRACE as a Chrome trace with the critical path and the findings marked.

    Open the result in https://ui.perfetto.dev or chrome://tracing.  Events on the critical
    path carry args.critical = true, the time they hold the path (critical_ns) and its cause;
    flow arrows follow the path across threads and GPU streams; a "tracekit: critical path"
    lane shows the path's stretches by cause and a "tracekit: findings" lane the idle gaps
    each finding explains.  Works for PyTorch profiler traces and Nsight Systems exports.
    """
    from .. import pipeline
    from ..report.annotate import annotated_trace, write_annotated

    with progress_line(quiet) as progress:
        result = pipeline.run(pipeline.load_trace(trace, cache=not no_cache, progress=progress), progress=progress)
        phase(progress, "annotating")
        doc = annotated_trace(result.tables, result.diagnosis, rank=rank, step=step, critical_only=critical_only)
        phase(progress, "writing")
        write_annotated(doc, out)
    n_path = sum(1 for e in doc["traceEvents"] if e.get("pid") is not None and e.get("cat") == "critical_path" and e["ph"] == "X")
    click.echo(f"wrote {out} ({len(doc['traceEvents']):,} events, {n_path:,} critical-path stretches); open it in https://ui.perfetto.dev", err=True)


command = annotate_cmd
