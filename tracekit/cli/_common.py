"""Helpers shared by the commands: the built-in sample trace and safe report writing."""

from __future__ import annotations

from pathlib import Path

import click


def demo_trace() -> Path:
    """The sample trace shipped inside the package (a single-process DataLoader stall)."""
    from importlib.resources import files

    return Path(str(files("tracekit") / "data" / "demo.kineto.json.gz"))


def write_output(text: str, out: Path | None) -> None:
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
