"""The ``tracekit`` command group.  Each command lives in its own module of this package
and exposes ``command`` (or several names in ``COMMANDS``); it parses options, gets its result
from the pipeline (:mod:`tracekit.pipeline`) and has it rendered (:func:`tracekit.report.render`),
computing nothing itself."""

from __future__ import annotations

import importlib

import click

from .._version import __version__

#: (module, attribute) of every command, in help order; a module not written yet is skipped
COMMANDS = (
    ("analyze", "command"),
    ("diff", "command"),
    ("annotate", "command"),
    ("capture", "command"),
    ("tui", "command"),
    ("batch", "command"),
    ("tables", "export_cmd"),
    ("tables", "info_cmd"),
    ("cache", "command"),
    ("mcp", "command"),
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="tracekit")
def cli() -> None:
    """tracekit: why is my GPU idle?

    Reads PyTorch profiler (Kineto) traces and Nsight Systems exports, finds the steps,
    measures GPU utilization and names the cause of every idle gap.
    """


for _module, _attr in COMMANDS:
    cli.add_command(getattr(importlib.import_module(f"{__package__}.{_module}"), _attr))
