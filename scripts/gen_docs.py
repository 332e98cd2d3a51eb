#!/usr/bin/env python3
"""Regenerate the generated parts of docs/ (schema reference, CLI reference, cause tables).

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


def causes_block(name: str) -> Callable[[], str]:
    """One table of the cause registry (tracekit.analysis.causes), by the function's name."""

    def text() -> str:
        from tracekit.analysis import causes

        fn: Callable[[], str] = getattr(causes, name)
        return fn()

    return text


#: (file, block) → its text; block None is the file's one ``generated:start/end`` pair, a name
#: is a ``generated:NAME:start/end`` pair (a file may have several)
GENERATED: dict[tuple[str, str | None], Callable[[], str]] = {
    ("docs/schema.md", None): schema_text,
    ("docs/cli.md", None): cli_text,
    ("docs/batch.md", None): batch_text,
    ("docs/efficiency.md", None): efficiency_text,
    ("docs/analysis.md", "idle-causes"): causes_block("idle_causes_markdown"),
    ("docs/json-report.md", "breakdown"): causes_block("breakdown_markdown"),
    ("docs/json-report.md", "finding-kinds"): causes_block("finding_kinds_markdown"),
    ("docs/critical-path.md", "path-causes"): causes_block("path_causes_markdown"),
    ("docs/critical-path.md", "knobs"): causes_block("knobs_markdown"),
    ("docs/critical-path.md", "finding-what-if"): causes_block("finding_what_if_markdown"),
}


def markers(block: str | None) -> tuple[str, str]:
    if block is None:
        return START, END
    return f"<!-- generated:{block}:start -->", f"<!-- generated:{block}:end -->"


def render(path: Path, body: str, block: str | None = None, text: str | None = None) -> str:
    """``text`` (the file's, unless given) with the block between its markers replaced by ``body``."""
    start, end = markers(block)
    text = path.read_text(encoding="utf-8") if text is None else text
    if start not in text or end not in text:
        raise SystemExit(f"{path}: missing {start} / {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body.rstrip()}\n{end}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args()
    stale: list[str] = []
    new_text: dict[str, str] = {}
    for (rel, block), fn in GENERATED.items():
        path = REPO / rel
        new_text[rel] = render(path, fn(), block, new_text.get(rel))
    for rel, new in new_text.items():
        path = REPO / rel
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
