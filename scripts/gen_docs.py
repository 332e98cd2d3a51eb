#!/usr/bin/env python3
"""Regenerate the generated parts of docs/ (schema reference, CLI reference).

Usage: python scripts/gen_docs.py          # rewrite the files
       python scripts/gen_docs.py --check  # exit 1 if a file is stale (used by the tests)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START = "<!-- generated:start -->"
END = "<!-- generated:end -->"


def schema_text() -> str:
    from tracekit.schema import schema_markdown

    return schema_markdown()


def cli_text() -> str:
    import click

    from tracekit.cli.app import cli

    parts: list[str] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        ctx = click.Context(cmd, info_name=" ".join(path), terminal_width=100, max_content_width=100)
        parts.append(f"### `{' '.join(path)}`\n\n```text\n{cmd.get_help(ctx)}\n```\n")
        if isinstance(cmd, click.Group):
            for name in sorted(cmd.commands):
                walk(cmd.commands[name], [*path, name])

    walk(cli, ["tracekit"])
    return "\n".join(parts)


def batch_text() -> str:
    from tracekit.batch.schemas import batch_schema_markdown

    return batch_schema_markdown()


def efficiency_text() -> str:
    from tracekit.analysis.efficiency import OP_EFFICIENCY

    return OP_EFFICIENCY.describe_markdown()


GENERATED: dict[str, Callable[[], str]] = {
    "docs/schema.md": schema_text,
    "docs/cli.md": cli_text,
    "docs/batch.md": batch_text,
    "docs/efficiency.md": efficiency_text,
}


def render(path: Path, body: str) -> str:
    text = path.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{path}: missing {START} / {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{body.rstrip()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args()
    stale = []
    for rel, fn in GENERATED.items():
        path = REPO / rel
        new = render(path, fn())
        if new != path.read_text(encoding="utf-8"):
            stale.append(rel)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print("stale generated docs: " + ", ".join(stale) + " (run python scripts/gen_docs.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
