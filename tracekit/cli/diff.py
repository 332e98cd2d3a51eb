"""``tracekit diff``: what a change did — two traces side by side, with the deltas."""

from __future__ import annotations

from pathlib import Path

import click

from ._common import write_output
from ._progress import phase, progress_line


@click.command("diff")
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text", show_default=True,
    help="Output format: terminal text, JSON (tracekit.diff/1, docs/reports.md), Markdown for a pull request, or a "
    "self-contained HTML page with the breakdown before and after.",
)
@click.option("--out", "-o", "out", type=click.Path(path_type=Path), help="Write the comparison to this file instead of stdout.")
@click.option(
    "--fail-if-slower", "fail_pct", type=click.FloatRange(min=0), metavar="PCT",
    help="Exit with status 1 when AFTER's median step time is more than PCT percent slower than BEFORE's and beyond the "
    "noise floor of both traces' step times (for CI); status 6 when the step times are not comparable.",
)
@click.option("--no-cache", is_flag=True, help="Parse the files even if cached copies exist.")
@click.option("--quiet", "-q", is_flag=True, help="No progress line on stderr (it is shown only on a terminal anyway).")
def diff_cmd(
    before: Path, after: Path, fmt: str, out: Path | None, fail_pct: float | None, no_cache: bool, quiet: bool = False
) -> int:
    """Compare two traces of the same training loop: BEFORE and AFTER a change.

    Shows step time, GPU utilization, each cause's milliseconds per step, the findings
    (fixed, new, better, worse) and the top kernels side by side with the deltas.  BEFORE
    and AFTER may be any mix of PyTorch profiler traces and Nsight Systems exports.

    The verdict is faster, slower, within noise (the change is inside the noise floor set by
    both traces' step-to-step spread) or not comparable (steps found by different sources or
    by periodicity, too few complete steps, different devices or rank counts), with reasons.

    Exit status: 0 on success; 1 when --fail-if-slower PCT is given and the step time grew
    by more than PCT percent and more than the noise floor; 2 for bad options; 3 for
    unreadable inputs; 6 when --fail-if-slower is given but the step times are not
    comparable (a trace has no complete step, or the verdict is not comparable).
    """
    from .. import pipeline
    from ..errors import AnalysisError
    from ..report import render

    with progress_line(quiet) as progress:
        comparison = pipeline.compare_files(before, after, cache=not no_cache, progress=progress)
        phase(progress, "report")
        text = render(comparison, fmt)
    write_output(text, out)
    if fail_pct is None:
        return 0
    result = comparison.diff
    step = result.step_ms
    if step.delta_pct is None:
        raise AnalysisError(
            "cannot check --fail-if-slower: a trace has no complete step, so its step time is unknown",
            path=before if step.before is None else after,
        )
    if result.verdict == "not_comparable":
        raise AnalysisError(
            "cannot check --fail-if-slower: the step times are not comparable: " + "; ".join(result.verdict_reasons),
            path=after,
        )
    if result.slower_than(fail_pct):
        click.echo(
            f"tracekit: slower: median step time {step.before:,.2f} ms -> {step.after:,.2f} ms "
            f"({step.delta_pct:+.1f}%), more than the allowed {fail_pct:g}% and the noise floor of ±{result.noise_pct or 0:.1f}%",
            err=True,
        )
        return 1
    return 0


command = diff_cmd
