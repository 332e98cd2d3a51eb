"""``tracekit export`` and ``tracekit info``: the canonical tables of one trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ._progress import phase, progress_line


@click.command("export")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--out", "-o", "out", type=click.Path(path_type=Path), required=True, help="Folder for the Parquet tables.")
@click.option("--no-cache", is_flag=True, help="Parse the file even if a cached copy exists (and do not store one).")
@click.option("--quiet", "-q", is_flag=True, help="No progress line on stderr (it is shown only on a terminal anyway).")
def export_cmd(trace: Path, out: Path, no_cache: bool, quiet: bool = False) -> None:
    """Write TRACE's canonical tables as Parquet files into --out.

    One file per table (events, links, flows, devices, threads, counters, memory) plus
    info.json; see docs/schema.md for the columns.  A trace captured with
    record_shapes=True also gets efficiency.parquet: FLOPs, TFLOP/s and the roofline
    place of every operator shape (docs/efficiency.md).
    """
    from .. import pipeline
    from ..analysis.efficiency import OP_EFFICIENCY, efficiency
    from ..analysis.steps import find_steps

    with progress_line(quiet) as progress:
        tables = pipeline.load_trace(trace, cache=not no_cache, progress=progress).tables
        phase(progress, "writing Parquet")
        written = tables.write_parquet(out)
        eff = efficiency(tables.events, tables.links, tables.devices, find_steps(tables.events, tables.links).frame)
        if eff.available:
            path = out / "efficiency.parquet"
            OP_EFFICIENCY.conform(eff.by_op).write_parquet(path, compression="zstd", statistics=True)
            written.append(path)
        else:
            click.echo(f"no efficiency.parquet: {eff.headline.removeprefix('MFU n/a: ')}", err=True)
    for warning in tables.info.warnings:
        click.echo(f"warning: {warning}", err=True)
    counts = tables.kind_counts()
    summary = ", ".join(f"{n:,} {k}" for k, n in counts.items())
    click.echo(f"wrote {len(written)} files to {out} ({tables.events.height:,} events: {summary})")


@click.command("info")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--no-cache", is_flag=True, help="Parse the file even if a cached copy exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def info_cmd(trace: Path, no_cache: bool, as_json: bool) -> None:
    """Summarise what TRACE contains: format, devices, event counts, time span, warnings."""
    from .. import pipeline

    tables = pipeline.load_trace(trace, cache=not no_cache).tables
    info = tables.info
    span_ms = (info.end_ns - info.start_ns) / 1e6 if info.start_ns is not None and info.end_ns is not None else None
    summary: dict[str, Any] = {
        **info.identity(),
        "span_ms": span_ms,
        "events": tables.kind_counts(),
        "links": tables.links.height,
        "devices": tables.devices.select("device", "name").to_dicts(),
        "truncated": info.truncated,
        "warnings": list(info.warnings),
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{info.path}")
    click.echo(f"  format    {info.format} {info.format_version or ''} {('(' + info.producer + ')') if info.producer else ''}".rstrip())
    if info.world_size or info.rank is not None:
        click.echo(f"  rank      {info.rank} of {info.world_size or '?'}")
    if span_ms is not None:
        click.echo(f"  span      {span_ms:,.3f} ms")
    for d in summary["devices"]:
        click.echo(f"  device {d['device']}  {d['name'] or '(unnamed)'}")
    click.echo("  events    " + ", ".join(f"{k} {n:,}" for k, n in summary["events"].items()))
    click.echo(f"  links     {tables.links.height:,} launch → GPU")
    for w in info.warnings:
        click.echo(f"  warning   {w}")
