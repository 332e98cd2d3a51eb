"""Command definitions (click).  Each command parses options, calls the headless core and
hands the result to a renderer; none of them computes anything itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="tracekit")
def cli() -> None:
    """tracekit: why is my GPU idle?

    Reads PyTorch profiler (Kineto) traces and Nsight Systems exports, finds the steps,
    measures GPU utilization and names the cause of every idle gap.
    """


def _demo_trace() -> Path:
    """The sample trace shipped inside the package (a single-process DataLoader stall)."""
    from importlib.resources import files

    return Path(str(files("tracekit") / "data" / "demo.kineto.json.gz"))


def _write(text: str, out: Path | None) -> None:
    if out is None:
        click.echo(text, nl=False)
        return
    from ..errors import UsageError

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        raise UsageError(f"cannot write the report: {exc.strerror or exc}", path=out) from exc
    click.echo(f"wrote {out}", err=True)


@cli.command("analyze")
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
        trace = _demo_trace()
        click.echo("No trace given: analysing tracekit's built-in sample (a training loop with a slow DataLoader).\n", err=True)
    tables = read_trace(trace, cache=not no_cache)
    diagnosis = diagnose(tables)
    if fmt == "json":
        text = json.dumps(to_json_dict(diagnosis), indent=2) + "\n"
    elif fmt == "markdown":
        text = render_markdown(diagnosis)
    else:
        text = render_text(diagnosis)
    _write(text, out)


@cli.command("export")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--out", "-o", "out", type=click.Path(path_type=Path), required=True, help="Folder for the Parquet tables.")
@click.option("--no-cache", is_flag=True, help="Parse the file even if a cached copy exists (and do not store one).")
def export_cmd(trace: Path, out: Path, no_cache: bool) -> None:
    """Write TRACE's canonical tables as Parquet files into --out.

    One file per table (events, links, flows, devices, threads, counters, memory) plus
    info.json; see docs/schema.md for the columns.
    """
    from ..reader import read_trace

    tables = read_trace(trace, cache=not no_cache)
    written = tables.write_parquet(out)
    for warning in tables.info.warnings:
        click.echo(f"warning: {warning}", err=True)
    counts = tables.kind_counts()
    summary = ", ".join(f"{n:,} {k}" for k, n in counts.items())
    click.echo(f"wrote {len(written)} files to {out} ({tables.events.height:,} events: {summary})")


@cli.command("info")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--no-cache", is_flag=True, help="Parse the file even if a cached copy exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def info_cmd(trace: Path, no_cache: bool, as_json: bool) -> None:
    """Summarise what TRACE contains: format, devices, event counts, time span, warnings."""
    from ..reader import read_trace

    tables = read_trace(trace, cache=not no_cache)
    info = tables.info
    span_ms = (info.end_ns - info.start_ns) / 1e6 if info.start_ns is not None and info.end_ns is not None else None
    summary: dict[str, Any] = {
        "path": info.path,
        "format": info.format,
        "format_version": info.format_version,
        "producer": info.producer,
        "rank": info.rank,
        "world_size": info.world_size,
        "ranks": list(info.ranks),
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


@cli.group("cache")
def cache_group() -> None:
    """Inspect or clear the parsed-trace cache."""


@cache_group.command("path")
def cache_path_cmd() -> None:
    """Print the cache folder."""
    from ..cache import cache_dir

    click.echo(str(cache_dir()))


@cache_group.command("clear")
def cache_clear_cmd() -> None:
    """Delete every cached trace (they are rebuilt on demand)."""
    from ..cache import cache_dir, clear

    n = clear()
    click.echo(f"removed {n} cached trace(s) from {cache_dir()}")
