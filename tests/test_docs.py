"""The documentation stays true: generated pages are fresh, links resolve, and the README's
example output is what the command prints."""

from __future__ import annotations

import glob
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
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


# ---------------------------------------------------------------------------------------------
# Every documented `tracekit ...` command runs.  Commands are taken from ```bash/```sh blocks
# (lines starting with `tracekit `) and from ```text/```console blocks (lines starting with
# `$ tracekit `).  They run in a scratch folder laid out like the repository's neighbourhood:
# `sample_traces/` is the repository's, `../shared` the shared traces when present, so files the
# commands write (`--out report.html`) land in the scratch folder.  When a ```text block follows
# a command (or starts with `$ tracekit`), its lines must be in what the command prints; a line
# ending in "..." matches as a prefix and a line "..." stands for omitted lines.

SHARED = REPO.parent / "shared"

#: why a documented command is not run, by subcommand
SKIP_SUBCOMMANDS = {
    "capture": "runs a training script under the profiler: needs torch and takes minutes (tests/test_capture.py covers it)",
    "tui": "an interactive terminal UI (tests/test_tui.py drives it headless)",
    "mcp": "a server on stdin/stdout for coding assistants (tests/test_mcp.py drives it with the SDK's client)",
}
#: why a command is not run, by the kind of input it names
SKIP_PLACEHOLDER = "names the reader's own file or folder (a placeholder such as trace.json.gz), not one in the repository"
SKIP_NO_SHARED = "needs ../shared/traces, which is absent here"
SKIP_SHELL = "a shell pipeline (| or &&), not a single tracekit command"


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    argv: tuple[str, ...]
    shown: tuple[str, ...]  # the output printed in the docs right after the command ("" when none)
    exit_code: int = 0  # a trailing comment `# exits N` documents another exit status

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}:{' '.join(self.argv[:2])}"


def _doc_commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for page in DOCS:
        text = page.read_text(encoding="utf-8")
        blocks = list(re.finditer(r"^```(\w*)\n(.*?)^```\s*$", text, re.S | re.M))
        for i, block in enumerate(blocks):
            lang, body = block.group(1), block.group(2)
            first_line = text.count("\n", 0, block.start()) + 2
            lines = body.splitlines()
            commands: list[tuple[int, str]] = []
            if lang in ("bash", "sh", "shell"):
                commands = [(n, s.strip()) for n, s in enumerate(lines) if s.strip().startswith("tracekit ")]
            elif lang in ("text", "console"):
                commands = [(n, s.strip()[2:]) for n, s in enumerate(lines) if s.strip().startswith("$ tracekit ")]
            for n, command in commands:
                shown: tuple[str, ...] = ()
                if lang in ("text", "console") and len(commands) == 1:
                    shown = tuple(lines[n + 1 :])
                elif lang in ("bash", "sh", "shell") and len(commands) == 1 and i + 1 < len(blocks):
                    nxt = blocks[i + 1]
                    between = text[block.end() : nxt.start()]
                    if nxt.group(1) == "text" and not between.strip() and not nxt.group(2).startswith("$ "):
                        shown = tuple(nxt.group(2).splitlines())
                argv = tuple(shlex.split(command, comments=True))
                documented = re.search(r"#\s*exits\s+(\d+)", command)
                code = int(documented.group(1)) if documented else 0
                found.append(DocCommand(str(page.relative_to(REPO)), first_line + n, argv[1:], shown, code))
    return found


def _positionals(argv: tuple[str, ...]) -> list[str]:
    """The positional arguments (input paths) of a command line, read with the command's own options."""
    from tracekit.cli.app import cli

    command = cli.commands.get(argv[0])
    if command is None or isinstance(command, click.Group):
        return []
    takes_value = {
        name: not (p.is_flag or p.count)
        for p in command.params
        if isinstance(p, click.Option)
        for name in (*p.opts, *p.secondary_opts)
    }
    out: list[str] = []
    args = iter(argv[1:])
    for arg in args:
        if arg in (">", "--"):
            break
        if arg.startswith("-"):
            if "=" not in arg and takes_value.get(arg, False):
                next(args, None)
            continue
        out.append(arg)
    return out


def _skip_reason(cmd: DocCommand, root: Path) -> str | None:
    if not cmd.argv:
        return "empty"
    if any(tok in ("|", "&&", ";") for tok in cmd.argv):
        return SKIP_SHELL
    if cmd.argv[0] in SKIP_SUBCOMMANDS:
        return SKIP_SUBCOMMANDS[cmd.argv[0]]
    for arg in _positionals(cmd.argv):
        if arg.startswith("../shared/"):
            if not SHARED.exists():
                return SKIP_NO_SHARED
            continue
        if arg.startswith("sample_traces/"):
            continue  # must exist: a broken sample path fails the test
        if not glob.glob(str(root / arg)):
            return SKIP_PLACEHOLDER
    return None


def _needs_shared(cmd: DocCommand) -> bool:
    return any(a.startswith("../shared/") for a in cmd.argv)


DOC_COMMANDS = _doc_commands()


def test_docs_commands_found() -> None:
    """The extraction itself works: the tutorial and the README contribute runnable commands."""
    pages = {c.page for c in DOC_COMMANDS}
    assert {"README.md", "docs/tutorial.md", "docs/faq.md"} <= pages
    runnable = [c for c in DOC_COMMANDS if c.argv and c.argv[0] not in SKIP_SUBCOMMANDS and not _needs_shared(c)]
    assert len(runnable) >= 10


def _check_shown(cmd: DocCommand, printed: list[str]) -> None:
    printed = [p.rstrip() for p in printed]
    for line in cmd.shown:
        line = line.rstrip()
        if not line.strip() or line.strip() == "...":
            continue
        if line.endswith("..."):
            prefix = line[:-3].rstrip(" ;")
            assert any(p.startswith(prefix) for p in printed), f"{cmd.page}:{cmd.line}: not printed: {line}"
        else:
            assert line in printed, f"{cmd.page}:{cmd.line}: not printed: {line}"


# Commands on ../shared traces run by default when it is present: the ones documented take 0.4-3 s each.
@pytest.mark.parametrize("cmd", [pytest.param(c, id=c.id) for c in DOC_COMMANDS])
def test_documented_command_runs(
    cmd: DocCommand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "sample_traces").symlink_to(REPO / "sample_traces")
    if SHARED.exists():
        (tmp_path / "shared").symlink_to(SHARED)
    reason = _skip_reason(cmd, root)
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.chdir(root)
    argv = list(cmd.argv)
    if ">" in argv:  # a redirect: the output is captured instead
        argv = argv[: argv.index(">")]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == cmd.exit_code, f"{cmd.page}:{cmd.line}: `tracekit {' '.join(cmd.argv)}` exited {code}\n{err}"
    _check_shown(cmd, out.splitlines() + err.splitlines())


def test_tutorial_sections_each_run_a_command() -> None:
    """Each cause of the tutorial gives the reader at least one command to copy."""
    text = (REPO / "docs" / "tutorial.md").read_text(encoding="utf-8")
    sections = re.split(r"^## \d+\. ", text, flags=re.M)[1:]
    assert len(sections) == 8
    for section in sections:
        title = section.splitlines()[0]
        blocks = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)
        assert any(line.startswith("tracekit ") for b in blocks for line in b.splitlines()), title


# ---------------------------------------------------------------------------------------------
# docs/performance.md is a page for users (what to expect, how to measure, what helps), not a
# log of experiments; the benchmark commands it and scripts/README.md show are the scripts' own.

PERFORMANCE = REPO / "docs" / "performance.md"
SCRIPTS = REPO / "scripts"
#: what an experiment log says and a user's page does not
LOG_WORDS = re.compile(
    r"\b(?:round|issue)s? \d+\b|\b\d{1,2}:\d{2} UTC\b|\b20\d\d-\d\d-\d\d\b|\bmeasured, not (?:kept|adopted|changed)\b",
    re.IGNORECASE,
)


def test_performance_page_is_short_and_for_users() -> None:
    text = PERFORMANCE.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 160, "docs/performance.md is a user's page of about 150 lines"
    assert LOG_WORDS.findall(text) == []
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == ["What to expect", "Compared with HTA", "Measuring it yourself", "Making a slow case faster"]
    assert "@@" not in text  # no figure left unfilled


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_link_anchors_name_a_heading(page: Path) -> None:
    """A link to a section (page.md#section) lands on a heading of that page."""
    for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if "://" in target or not (target == "" or target.endswith(".md")):
            continue
        dest = page if target == "" else page.parent / target
        assert anchor in _anchors(dest), f"{page.name}: no heading for {target}#{anchor}"


BENCH_PAGES = [PERFORMANCE, SCRIPTS / "README.md"]


@pytest.mark.parametrize("page", BENCH_PAGES, ids=[str(p.relative_to(REPO)) for p in BENCH_PAGES])
def test_documented_script_options_exist(page: Path) -> None:
    """Every `scripts/NAME` a page shows exists, with the options the page gives it."""
    text = page.read_text(encoding="utf-8")
    found = re.findall(r"scripts/([\w.]+\.(?:py|sh))([^`\n]*)", text)
    assert found, f"{page.name} shows no script command"
    for name, rest in found:
        script = SCRIPTS / name
        assert script.is_file(), f"{page.name}: no scripts/{name}"
        source = script.read_text(encoding="utf-8")
        for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest.split("#", 1)[0]):
            assert f'"{option}"' in source, f"{page.name}: scripts/{name} has no option {option}"


def test_scripts_readme_lists_every_script() -> None:
    listed = set(re.findall(r"^\| `([^`]+)` \|", (SCRIPTS / "README.md").read_text(encoding="utf-8"), flags=re.M))
    # a script is a file, or a package run with ``python scripts/NAME`` (listed as ``NAME/``)
    present = {p.name for p in SCRIPTS.iterdir() if p.is_file() and p.name != "README.md"}
    present |= {f"{p.name}/" for p in SCRIPTS.iterdir() if (p / "__main__.py").is_file()}
    assert present <= listed, f"scripts/README.md has no line for {sorted(present - listed)}"
    assert listed <= present, f"scripts/README.md lists scripts that are gone: {sorted(listed - present)}"
