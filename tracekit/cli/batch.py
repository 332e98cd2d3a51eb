"""``tracekit batch``: analyse an archive of traces into Parquet tables (docs/batch.md)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click


@click.command("batch")
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", "-o", "out", type=click.Path(path_type=Path), required=True,
              help="Folder for the Parquet tables (created). Rerunning into the same folder only analyses new or changed files.")
@click.option("--workers", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: the CPUs available). With --engine ray and no --ray-address: CPUs of the local Ray instance.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where the per-trace work runs: local processes, or a Ray cluster (pip install 'tracekit-gpu[ray]').")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="Ray cluster to use (ray://HOST:10001, or auto); without it a local Ray instance is started.")
@click.option("--fail-fast", is_flag=True, help="Stop at the first file that cannot be analysed and exit non-zero.")
@click.option("--cache/--no-cache", default=False, show_default=True,
              help="Read and fill the parsed-trace cache (tracekit cache path); off by default so an archive is not copied into it.")
@click.option("--force", is_flag=True, help="Analyse every file again, ignoring the results already in --out.")
@click.option("--max-memory-per-file", "max_memory", metavar="SIZE", default=None,
              help="Stop the analysis of a file whose worker process holds more than SIZE of memory (resident, e.g. 8G, "
              "512M); the file gets an error row (memory_limit) and the batch goes on. Local engine; Linux.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary (errors still go to stderr).")
def batch_cmd(inputs: tuple[str, ...], out: Path, workers: int | None, engine: str, ray_address: str | None,
              fail_fast: bool, cache: bool, force: bool, max_memory: str | None, quiet: bool) -> None:
    """Analyse many traces at once: which jobs waste GPU time, why, and which ranks straggle.

    INPUTS are trace files, folders (searched recursively for .json, .json.gz, .sqlite and
    .nsys-rep files), globs (quote them: 'runs/**/rank*.json.gz') and manifests (a .txt/.lst
    file, or @FILE, listing one input per line).  Kineto and Nsight traces may be mixed.
    Files of one capture (a folder with metadata.json, or files whose names differ only in
    the rank number, or that state the same world size) form a job of ranks.

    Writes traces.parquet (one row per file), findings.parquet, jobs.parquet (stragglers,
    load imbalance, exposed communication per job), ranks.parquet, steps.parquet,
    collectives.parquet and ops.parquet (FLOPs, TFLOP/s and roofline place of every
    operator shape of traces captured with record_shapes=True) into --out, each atomically.  A file that cannot be analysed gets
    an error row and the batch goes on (exit 0) unless --fail-fast.
    """
    from ..batch import BatchProgress, run_batch
    from ..batch.engines import parse_size

    limit = parse_size(max_memory) if max_memory is not None else None
    bar = _ProgressBar() if not quiet and sys.stderr.isatty() else None

    def on_progress(p: BatchProgress) -> None:
        if bar is not None:
            bar.update(p)

    try:
        result = run_batch(
            list(inputs), out, workers=workers, engine=engine, ray_address=ray_address, fail_fast=fail_fast,
            cache=cache, incremental=not force, progress=on_progress, max_memory_per_file=limit,
        )
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
            bar = None
        click.echo(f"interrupted: {out} holds the files analysed so far; run the same command again to resume", err=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    if not quiet:
        for note in result.notes:
            click.echo(f"note: {note}", err=True)
        click.echo(render_summary(result), nl=False)
    if result.first_error is not None:
        raise _as_error(result.first_error)


class _ProgressBar:
    """A rich progress bar on stderr: files done / total, failures, traces/min, MB/s."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("analysing"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=Console(stderr=True), transient=True,
        )
        self.task: Any = None
        self.progress.start()

    def update(self, p: Any) -> None:
        rate = 60.0 * p.done / p.elapsed_s if p.elapsed_s > 0 else 0.0
        mbs = p.bytes_done / 1e6 / p.elapsed_s if p.elapsed_s > 0 else 0.0
        stats = f"{p.failed} failed · {rate:,.0f} traces/min · {mbs:,.1f} MB/s"
        if p.reused:
            stats += f" · {p.reused} reused"
        if self.task is None:
            self.task = self.progress.add_task("batch", total=p.total, stats=stats)
        self.progress.update(self.task, completed=p.done, total=p.total, stats=stats)

    def close(self) -> None:
        self.progress.stop()


def _as_error(r: Any) -> Exception:
    from .. import errors

    cls = getattr(errors, str(r.error_kind), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.TracekitError)):
        cls = errors.TracekitError
    return cls(f"{r.error} (stopped by --fail-fast)", path=r.path)


def render_summary(result: Any) -> str:
    """The terminal summary of a batch (plain text)."""
    import polars as pl

    t = result.tables
    traces, jobs = t["traces"], t["jobs"]
    lines = [
        f"tracekit batch · {result.files} files: {result.analysed} analysed, {result.reused} reused, "
        f"{result.duplicates} duplicate{'s' if result.duplicates != 1 else ''} · {result.jobs} jobs · {result.seconds:,.1f} s"
        + (f" · {result.traces_per_minute:,.0f} traces/min, {result.mb_per_s:,.1f} MB/s" if result.analysed else ""),
    ]
    failed = traces.filter(pl.col("error").is_not_null())
    kinds = Counter(str(k) for k in failed["error_kind"].to_list())
    if failed.height:
        lines.append(f"failed: {failed.height} file{'s' if failed.height != 1 else ''} ("
                     + ", ".join(f"{n} {k}" for k, n in kinds.most_common()) + "); reasons in traces.parquet, column error")
    else:
        lines.append("failed: 0 files")
    if result.stopped_early:
        lines.append("stopped early (--fail-fast): the tables hold the files analysed so far")
    if result.ignored:
        lines.append(f"{result.ignored} other file{'s' if result.ignored != 1 else ''} in the folders were not trace files and were skipped")

    wasted = jobs.filter(pl.col("gpu_idle_s").is_not_null()).sort(["gpu_idle_s", "job"], descending=[True, False], nulls_last=True).head(5)
    if wasted.height:
        lines += ["", "Jobs with the most idle GPU time (complete steps, all ranks)"]
        for r in wasted.iter_rows(named=True):
            util = "n/a" if r["gpu_utilization"] is None else f"{100 * r['gpu_utilization']:.0f}%"
            step = "n/a" if r["step_ms_median"] is None else f"{r['step_ms_median']:,.1f} ms"
            lines.append(f"  {r['gpu_idle_s']:>9,.2f} s idle · util {util:>4} · step {step:>11} · {r['n_ranks']} rank(s) · "
                         f"{r['top_finding'] or 'no finding'} · {_short(r['job'])}")
    multi = jobs.filter(pl.col("n_ranks") > 1)
    if multi.height:
        lines += ["", "Multi-rank jobs"]
        for r in multi.sort("straggle_ms", descending=True, nulls_last=True).head(10).iter_rows(named=True):
            bits = [f"{r['n_ranks']} ranks" + (f" of {r['world_size']}" if r["world_size"] and r["world_size"] != r["n_ranks"] else "")]
            if r["stragglers"]:
                bits.append(f"stragglers {', '.join(str(x) for x in r['stragglers'])} (others wait {r['straggle_ms']:,.1f} ms/step)")
            else:
                bits.append("no straggler")
            if r["imbalance"] is not None:
                bits.append(f"imbalance {100 * r['imbalance']:.1f}%")
            if r["exposed_communication_ms"] is not None:
                bits.append(f"exposed communication {r['exposed_communication_ms']:,.1f} ms/step")
            lines.append(f"  {_short(r['job'])}: " + " · ".join(bits))
    tops = Counter(str(k) for k in traces["top_finding"].drop_nulls().to_list())
    if tops:
        lines += ["", "Top finding per trace: " + ", ".join(f"{k} ×{n}" for k, n in tops.most_common(6))]
    lines += ["", f"wrote {', '.join(p.name for p in result.written)} to {result.out}"]
    return "\n".join(lines) + "\n"


def _short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


command = batch_cmd
