"""The ``tracekit`` command line.

:func:`main` is the one exit point: it runs the click command group, turns every
:class:`~tracekit.errors.TracekitError` into a one-paragraph message on stderr with the
error's exit code, and never shows a traceback for bad input.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ..errors import TracekitError


def main(argv: Sequence[str] | None = None) -> int:
    from .app import cli

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = cli.main(args=args, prog_name="tracekit", standalone_mode=False)
    except TracekitError as exc:
        click.echo(exc.render(), err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("tracekit: interrupted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("tracekit: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except BrokenPipeError:
        return 0
    if isinstance(result, int):
        return result
    return 0


def entry() -> None:  # pragma: no cover - console script shim
    sys.exit(main())


__all__ = ["entry", "main"]
