"""The command line's contract (exit codes, one-paragraph errors, no tracebacks), the
content-keyed cache, Parquet export, and the headless boundary."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import write_trace

import tracekit
from tracekit.cli import main
from tracekit.reading import cache as tk_cache
from tracekit.schema import TABLES, TraceTables


def _events(n: int = 3) -> list[dict[str, object]]:
    return [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 100 + 10 * i, "dur": 5,
         "args": {"External id": i}}
        for i in range(n)
    ]


def test_read_trace_uses_the_cache_and_never_serves_stale_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_trace(tmp_path / "t.json", _events(3))
    first = tracekit.read_trace(path)
    assert first.events.height == 3

    import tracekit.reading.trace as reader

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed again although the content did not change")

    monkeypatch.setattr(reader, "parse", boom)
    second = tracekit.read_trace(path)
    assert second.events.equals(first.events)
    assert second.info.path == str(path)

    # a copy at another path is still a hit, reported under its own path
    copy = tmp_path / "copy.json"
    copy.write_bytes(path.read_bytes())
    assert tracekit.read_trace(copy).info.path == str(copy)

    monkeypatch.undo()
    write_trace(path, _events(5))  # same name, new content
    assert tracekit.read_trace(path).events.height == 5


def _counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    import tracekit.reading.trace as reader

    parsed: list[Path] = []
    real = reader.parse

    def counting(path: Path, **kwargs: object) -> object:
        parsed.append(path)
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reader, "parse", counting)
    return parsed


def test_an_unchanged_file_is_not_hashed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_trace(tmp_path / "t.json", _events(3))
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    monkeypatch.setattr(tk_cache, "SETTLE_NS", 0)
    tracekit.read_trace(path)
    hashed: list[object] = []
    real_key = tk_cache.content_key
    monkeypatch.setattr(tk_cache, "content_key", lambda *a, **k: hashed.append(a) or real_key(*a, **k))
    assert tracekit.read_trace(path).events.height == 3
    assert hashed == []
    # a damaged record of the file's identity is ignored: the file is hashed again
    (record,) = [p for p in (tk_cache.cache_dir() / "stat").rglob("*") if p.is_file()]
    record.write_text("{not json")
    assert tracekit.read_trace(path).events.height == 3
    assert len(hashed) == 1


def test_an_edited_file_with_its_old_size_and_mtime_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The edit changes the file's ctime, which cannot be set back: its remembered identity
    no longer matches, so it is hashed and parsed, never served from the old entry."""
    monkeypatch.setattr(tk_cache, "SETTLE_NS", 0)
    path = write_trace(tmp_path / "t.json", _events(3))
    old = path.stat()
    assert tracekit.read_trace(path).events["name"].to_list() == ["op0", "op1", "op2"]
    text = path.read_text().replace('"op1"', '"opX"')
    time.sleep(0.01)
    path.write_text(text)
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert path.stat().st_size == old.st_size
    assert path.stat().st_mtime_ns == old.st_mtime_ns
    parsed = _counting_parses(monkeypatch)
    assert tracekit.read_trace(path).events["name"].to_list() == ["op0", "opX", "op2"]
    assert parsed == [path]


def test_another_tracekit_version_does_not_take_a_remembered_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tk_cache, "SETTLE_NS", 0)
    path = write_trace(tmp_path / "t.json", _events(2))
    tracekit.read_trace(path)
    monkeypatch.setattr(tk_cache, "__version__", "99.0")
    parsed = _counting_parses(monkeypatch)
    assert tracekit.read_trace(path).events.height == 2
    assert parsed == [path]  # hashed with the new version's key, a miss, parsed


def test_a_file_changed_moments_ago_is_not_remembered(tmp_path: Path) -> None:
    """Within SETTLE_NS of its last change a file is hashed on every open (a second change in
    the same clock tick would leave its identity unchanged)."""
    path = write_trace(tmp_path / "t.json", _events(2))
    tracekit.read_trace(path)
    assert not (tk_cache.cache_dir() / "stat").exists()
    assert tk_cache.known_key(path, path.stat()) is None


def test_a_remembered_key_whose_entry_was_removed_parses_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tk_cache, "SETTLE_NS", 0)
    path = write_trace(tmp_path / "t.json", _events(2))
    tracekit.read_trace(path)
    shutil.rmtree(tk_cache.cache_dir() / "traces")
    parsed = _counting_parses(monkeypatch)
    assert tracekit.read_trace(path).events.height == 2
    assert parsed == [path]
    assert tk_cache.clear() == 1
    assert not (tk_cache.cache_dir() / "stat").exists()


def test_clear_removes_the_nsight_exports_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a .nsys-rep is exported to SQLite under exports/<key>/ (tracekit/reading/trace.py): cleared too
    export = tk_cache.cache_dir() / "exports" / ("0" * 64) / "report.sqlite"
    export.parent.mkdir(parents=True)
    export.write_bytes(b"SQLite format 3\x00")
    path = write_trace(tmp_path / "t.json", _events(2))
    tracekit.read_trace(path)
    assert tk_cache.clear() == 1
    assert not (tk_cache.cache_dir() / "exports").exists()


def test_cache_dir_follows_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "here"))
    assert tk_cache.cache_dir() == tmp_path / "here"
    monkeypatch.delenv("TRACEKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tk_cache.cache_dir() == tmp_path / "xdg" / "tracekit"


def test_damaged_cache_entry_is_rebuilt(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", _events(2))
    tracekit.read_trace(path)
    entry = tk_cache.entry_dir(tk_cache.content_key(path))
    (entry / "events.arrow").write_bytes(b"not a cache file")
    assert tracekit.read_trace(path).events.height == 2
    assert tracekit.read_trace(path).events.height == 2


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache folder that cannot be made (a file stands in its way, so even root cannot):
    the trace is parsed on every read, with no error and nothing written."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(blocker / "cache"))
    path = write_trace(tmp_path / "t.json", _events(3))
    parsed = _counting_parses(monkeypatch)
    assert tracekit.read_trace(path).events.height == 3
    assert tracekit.read_trace(path).events.height == 3
    assert parsed == [path, path]
    assert tk_cache.store(tk_cache.content_key(path), tracekit.read_trace(path, cache=False)) is False
    assert blocker.read_text() == "a file, not a folder"


def test_a_read_only_cache_is_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading an entry needs no write access: its files are mapped read-only."""
    path = write_trace(tmp_path / "t.json", _events(3))
    first = tracekit.read_trace(path)
    top = tk_cache.cache_dir()
    everything = [top, *top.rglob("*")]
    for p in everything:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        parsed = _counting_parses(monkeypatch)
        assert tracekit.read_trace(path).events.equals(first.events)
        assert parsed == []
    finally:
        for p in everything:
            p.chmod(0o755 if p.is_dir() else 0o644)


def test_no_cache_flag_skips_the_cache(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", _events(2))
    assert main(["info", str(path), "--no-cache"]) == 0
    assert not (tk_cache.cache_dir() / "traces").exists()
    assert tk_cache.clear() == 0


def test_export_writes_every_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace(tmp_path / "t.json", _events(4))
    out = tmp_path / "out"
    assert main(["export", str(path), "--out", str(out)]) == 0
    assert "wrote 8 files" in capsys.readouterr().out
    for schema in TABLES:
        frame = pl.read_parquet(out / f"{schema.name}.parquet")
        assert frame.schema == schema.polars_schema
    back = TraceTables.read_parquet(out)
    assert back.events.height == 4
    assert json.loads((out / "info.json").read_text())["format"] == "kineto"


def test_info_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace(tmp_path / "t.json", _events(2))
    assert main(["info", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["events"] == {"cpu_op": 2}


@pytest.mark.parametrize(
    ("content", "code", "needle"),
    [(None, 3, "no such file"), (b"", 3, "empty"), (b"a,b\n1,2\n", 3, "unrecognised"), (b"{}", 3, "traceEvents")],
    ids=["missing", "empty", "csv", "no-events"],
)
def test_bad_input_gives_one_paragraph_and_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, code: int, needle: str
) -> None:
    path = tmp_path / "input.json"
    if content is not None:
        path.write_bytes(content)
    assert main(["info", str(path)]) == code
    err = capsys.readouterr().err
    assert needle in err
    assert str(path) in err
    assert "Traceback" not in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export"]) == 2
    assert main(["no-such-command"]) == 2


def test_console_script_runs_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    proc = subprocess.run([sys.executable, "-m", "tracekit", "info", str(bad)], capture_output=True, text=True,
                          env={**os.environ}, check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr


HEADLESS = ["tracekit", "tracekit.schema", "tracekit.errors", "tracekit.reading.trace", "tracekit.reading.cache", "tracekit.parsers",
            "tracekit.parsers.kineto", "tracekit.parsers.nsight", "tracekit.analysis", "tracekit.analysis.diagnose",
            "tracekit.analysis.replay", "tracekit.analysis.job_replay", "tracekit.analysis.efficiency",
            "tracekit.analysis.steady", "tracekit.report", "tracekit.report.formatting", "tracekit.batch", "tracekit.reading.job",
            "tracekit.api", "tracekit.progress", "tracekit.pipeline"]


@pytest.mark.parametrize("module", HEADLESS)
def test_headless_core_never_imports_textual_or_rich(module: str) -> None:
    code = (
        f"import importlib, sys; importlib.import_module({module!r}); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'));"
        "print(','.join(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "", f"{module} imported {proc.stdout.strip()}"


def test_every_subpackage_ships_in_the_wheel() -> None:
    """pyproject.toml lists packages explicitly (parsers/ is mapped to tracekit.parsers):
    a new subpackage that is not listed would be missing from installs.  A data folder
    without ``__init__.py`` (tracekit/data, the capture bootstrap) counts too: Python can
    import it as a namespace package, and setuptools warns at every install that it would be
    left out unless it is listed."""
    import tomllib
    from conftest import REPO

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {"tracekit", "tracekit.parsers"}
    for folder in [REPO / "tracekit", *(REPO / "tracekit").rglob("*")]:
        if folder.is_dir() and folder.name != "__pycache__" and any(f.is_file() for f in folder.iterdir()):
            found.add(".".join(folder.relative_to(REPO).parts))
    assert listed == found
