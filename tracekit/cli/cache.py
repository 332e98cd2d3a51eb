"""``tracekit cache``: the parsed-trace cache."""

from __future__ import annotations

import click


@click.group("cache")
def cache_group() -> None:
    """Inspect or clear the parsed-trace cache."""


@cache_group.command("path")
def cache_path_cmd() -> None:
    """Print the cache folder."""
    from ..reading.cache import cache_dir

    click.echo(str(cache_dir()))


@cache_group.command("clear")
def cache_clear_cmd() -> None:
    """Delete every cached trace and Nsight export (they are rebuilt on demand)."""
    from ..reading.cache import cache_dir, clear

    n = clear()
    click.echo(f"removed {n} cached trace(s) from {cache_dir()}")


command = cache_group
