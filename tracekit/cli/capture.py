"""``tracekit capture``: run a training command with instrumentation and a profiler schedule."""

from __future__ import annotations

from pathlib import Path

import click


@click.command(
    "capture",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--out", "-o", "out", type=click.Path(path_type=Path), help="Output folder  [default: ./tracekit-capture-DATE-TIME]")
@click.option("--overwrite", is_flag=True, help="Replace a previous capture in --out.")
@click.option(
    "--backend", type=click.Choice(["torch", "nsys", "none"]), default="torch", show_default=True,
    help="torch: torch.profiler, one Kineto trace per rank. nsys: run under `nsys profile` with a capture range on "
    "the recorded steps, exported to SQLite. none: NVTX/record_function ranges only (bring your own profiler).",
)
@click.option("--wait", type=int, default=1, show_default=True, help="Steps to skip before profiling.")
@click.option("--warmup", type=int, default=1, show_default=True, help="Steps traced and discarded (profiler warm-up).")
@click.option("--active", type=int, default=5, show_default=True, help="Steps recorded.")
@click.option("--repeat", type=int, default=1, show_default=True, help="Cycles of wait/warmup/active (0: until the run ends).")
@click.option("--with-stack", is_flag=True, help="Record Python stacks (names the line behind each sync).")
@click.option("--record-shapes", is_flag=True, help="Record operator input shapes.")
@click.option("--memory", is_flag=True, help="Record memory allocations (profile_memory).")
@click.option(
    "--step-on", type=click.Choice(["optimizer", "dataloader"]), default="optimizer", show_default=True,
    help="What ends a step: each optimizer.step(), or each DataLoader fetch (inference loops). "
    "tracekit.step() marks in the script take precedence.",
)
@click.option("--analyze", "analyze", is_flag=True, help="Analyse the traces when the command ends and print the report.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but the command's own output.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def capture_cmd(
    out: Path | None, overwrite: bool, backend: str, wait: int, warmup: int, active: int, repeat: int,
    with_stack: bool, record_shapes: bool, memory: bool, step_on: str, analyze: bool, quiet: bool,
    command: tuple[str, ...],
) -> int:
    """Run COMMAND (after `--`) and leave traces that `tracekit analyze` explains.

    \b
      tracekit capture -- python train.py --epochs 1
      tracekit capture --out run1 -- torchrun --nproc-per-node 2 train.py

    The script needs no changes: every Python process of COMMAND that imports torch gets
    NVTX and record_function ranges around each DataLoader fetch, forward, backward and
    optimizer step (tracekit.data_loading, tracekit.forward, ...), numbered steps ending at
    each optimizer step, and a profiler that records steps WAIT+WARMUP to
    WAIT+WARMUP+ACTIVE-1.  Each rank writes its own trace; OUT/metadata.json describes the
    run.  The exit code is the command's.
    """
    import tracekit

    from ..capture.config import CaptureConfig, Schedule
    from ..capture.runner import default_out, run_capture

    def say(text: str) -> None:
        if not quiet:
            click.echo(text, err=True)

    target = (out or default_out()).resolve()
    config = CaptureConfig(
        out=str(target),
        backend=backend,
        schedule=Schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
        with_stack=with_stack,
        record_shapes=record_shapes,
        memory=memory,
        step_on=step_on,
        tracekit_path=str(Path(tracekit.__file__).resolve().parent.parent),
    )
    shown = _display(target)
    what = "ranges only, no profiler" if backend == "none" else f"records {config.schedule.describe()} of each process"
    say(f"tracekit: capturing into {shown}/ (backend {backend}: {what})")
    result = run_capture(list(command), config, overwrite=overwrite, echo=say)
    meta = result.metadata
    say(_summary(shown, meta))
    if result.traces:
        if analyze:
            _analyze(result.out, [result.out / t for t in result.traces])
        else:
            say(f"next: tracekit analyze {shown}/")
    return result.exit_code


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _summary(shown: str, meta: dict[str, object]) -> str:
    ranks = meta.get("ranks") or []
    assert isinstance(ranks, list)
    with_trace = [r for r in ranks if r.get("trace")]
    lines = []
    if meta.get("interrupted"):
        how = "was interrupted"
    elif meta.get("crashed"):
        how = f"failed (exit code {meta.get('exit_code')}{', ' + str(meta['signal']) if meta.get('signal') else ''})"
    else:
        how = "finished"
    lines.append(f"tracekit: the command {how} after {meta.get('duration_s')} s")
    for r in ranks:
        err = f"; it stopped with {r['error']}" if r.get("error") else ""
        where = r.get("trace") or "no trace"
        lines.append(f"  rank {r['rank']} (pid {r['pid']}): {r.get('steps') or 0} steps, {where}{err}")
    notes = meta.get("notes") or []
    assert isinstance(notes, list)
    lines.extend(f"  note: {n}" for n in notes)
    if with_trace:
        files = {t for r in with_trace for t in (r.get("traces") or [r["trace"]])}
        lines.append(f"tracekit: wrote {len(files)} trace file(s) and metadata.json to {shown}/")
    elif meta.get("backend") == "none":
        lines.append(f"tracekit: backend none emits ranges only (no trace); {shown}/metadata.json describes the run")
    else:
        lines.append(f"tracekit: no trace was written; {shown}/metadata.json says what ran")
    return "\n".join(lines)


def _analyze(folder: Path, traces: list[Path]) -> None:
    """Print the analysis of the capture: the whole folder (a job of ranks) where ``tracekit
    analyze`` reads folders, else the first rank's trace."""
    from ..errors import TracekitError
    from .analyze import analyze_cmd

    ctx = click.get_current_context()
    click.echo("", err=True)
    try:
        ctx.invoke(analyze_cmd, trace=folder)
    except TracekitError:
        if folder.is_dir() and traces:
            ctx.invoke(analyze_cmd, trace=traces[0])
        else:
            raise


command = capture_cmd
