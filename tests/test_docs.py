"""The documentation stays true: generated pages are fresh, links resolve, and the README's
example output is what the command prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from tracekit.cli import main

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "sample_traces" / "README.md"]


def test_generated_docs_are_fresh() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_docs.py"), "--check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def test_readme_quick_start_has_two_commands() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2
    assert "tracekit analyze" in commands[0]
    assert commands[1] == "scripts/test"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "scripts/test" in ci


def test_readme_example_output_is_current(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("```text\n$ tracekit analyze ", 1)[1].split("```", 1)[0]
    arg, *shown = block.splitlines()
    monkeypatch.chdir(REPO)
    assert main(["analyze", arg]) == 0
    printed = capsys.readouterr().out.splitlines()
    for line in shown:
        if line.rstrip().endswith("..."):
            prefix = line.rstrip()[:-3].rstrip(" ;")
            assert any(p.startswith(prefix) for p in printed), line
        else:
            assert line in printed, line
