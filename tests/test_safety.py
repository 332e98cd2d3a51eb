"""Safety properties: bounded decompression, a cache that survives deletion and concurrent
writers, no code execution from trace content, outputs that stay in the folder the user chose
whatever the traces and the capture's processes name, results independent of event order and
of the number of batch workers."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from conftest import REPO, SAMPLE_TRACES
from polars.testing import assert_frame_equal
from test_batch import _archive

import tracekit
from tracekit.analysis import diagnose
from tracekit.batch import BATCH_TABLES
from tracekit.capture import torch_hooks
from tracekit.capture.config import CaptureConfig
from tracekit.capture.session import Session
from tracekit.cli import main
from tracekit.errors import TraceTooLargeError
from tracekit.parsers import parse
from tracekit.reading import cache as tk_cache
from tracekit.report import to_json_dict
from tracekit.schema import TABLE_NAMES


def test_gzip_bomb_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [' + b" " * (64 * 1024 * 1024))
    assert path.stat().st_size < 200_000
    monkeypatch.setenv("TRACEKIT_MAX_BYTES", str(8 * 1024 * 1024))
    with pytest.raises(TraceTooLargeError, match="gzip bomb") as info:
        parse(path)
    assert "TRACEKIT_MAX_BYTES" in info.value.render()


#: a reader in its own interpreter (a subprocess, so it runs however pytest was started)
_READER = "import sys, tracekit; print(tracekit.read_trace(sys.argv[1]).events.height)"


def test_concurrent_readers_share_one_cache_safely(tmp_path: Path) -> None:
    src = SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json"
    path = tmp_path / "t.json"
    shutil.copy(src, path)
    cache_dir = tmp_path / "cache"
    env = {**os.environ, "TRACEKIT_CACHE_DIR": str(cache_dir)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _READER, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-1000:] for _, err in results]
    heights = {int(out) for out, _ in results}
    expected = parse(path).events.height
    assert heights == {expected}
    entries = list((cache_dir / "traces").glob("*/*"))
    assert len(entries) == 1
    assert not entries[0].name.startswith(".tmp")



def test_cache_can_be_deleted_at_any_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleted between runs, or under a run that is parsing: the result is whole and the
    entry is rebuilt."""
    path = tmp_path / "t.json"
    shutil.copy(SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json", path)
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(cache_dir))
    expected = parse(path)
    assert tracekit.read_trace(path).events.equals(expected.events)
    shutil.rmtree(cache_dir)
    assert tracekit.read_trace(path).events.equals(expected.events)  # rebuilt, not served stale
    entries = list((cache_dir / "traces").glob("*/*"))
    assert len(entries) == 1

    import tracekit.reading.trace as reader

    real_parse = reader.parse

    def parse_then_delete_cache(*args: Any, **kwargs: Any) -> Any:
        tables = real_parse(*args, **kwargs)
        shutil.rmtree(cache_dir)  # e.g. `tracekit cache clear` in another terminal
        return tables

    other = tmp_path / "other.json"  # not cached yet: this read parses
    shutil.copy(SAMPLE_TRACES / "synthetic" / "healthy.kineto.json", other)
    monkeypatch.setattr(reader, "parse", parse_then_delete_cache)
    assert tracekit.read_trace(other).events.equals(parse(other).events)
    monkeypatch.setattr(reader, "parse", real_parse)
    assert tk_cache.load(tk_cache.content_key(other), other) is not None  # stored after the deletion
    assert tk_cache.load(tk_cache.content_key(path), path) is None  # deleted, so parsed again next time


def test_cache_entry_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash while writing leaves no entry that a later read would trust."""
    path = tmp_path / "t.json"
    shutil.copy(SAMPLE_TRACES / "synthetic" / "healthy.kineto.json", path)
    tables = parse(path)
    key = tk_cache.content_key(path)

    real_write = tk_cache._write_tables

    def crash(entry: Path, tables: object, key: str) -> None:
        real_write(entry, tables, key)  # type: ignore[arg-type]
        file = tk_cache.table_file(entry, "events")
        with open(file, "r+b") as fh:  # half written when the disk filled up
            fh.truncate(file.stat().st_size // 2)
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(tk_cache, "_write_tables", crash)
        assert tk_cache.store(key, tables) is False
    assert tk_cache.load(key, path) is None
    assert not list((tk_cache.cache_dir() / "traces").rglob("*.arrow"))
    assert not list((tk_cache.cache_dir() / "traces").rglob("complete"))


def test_no_code_execution_from_trace_content() -> None:
    """Nothing read from a trace is unpickled, eval'd or exec'd."""
    pattern = re.compile(r"\b(pickle|marshal|shelve)\b|(?<![\w.])(eval|exec)\(|yaml\.load\(")
    offenders = []
    for root in ("tracekit", "parsers"):
        for path in (REPO / root).rglob("*.py"):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line) and not line.lstrip().startswith("#"):
                    offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []


def test_diagnosis_does_not_depend_on_event_order(tmp_path: Path) -> None:
    doc = json.loads((SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json").read_text())
    a = tmp_path / "a.json"
    a.write_text(json.dumps(doc))
    random.Random(3).shuffle(doc["traceEvents"])
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    ja = to_json_dict(diagnose(parse(a)))
    jb = to_json_dict(diagnose(parse(b)))
    ja["trace"]["path"] = jb["trace"]["path"] = ""
    assert ja == jb


# --------------------------------------------------------------------------- outputs stay in their folder

SYNTH = SAMPLE_TRACES / "synthetic"


def _hostile_names(tmp_path: Path) -> list[str]:
    """Names a trace (or a capture's process) may hold that escape a folder when used as a path:
    climbs, an absolute path (inside ``tmp_path``, so that the walk of the tests sees it), a NUL
    byte, a Windows path, a name longer than file systems allow, unicode, the folder itself."""
    return ["../../evil", "../../../evil/x.json", str(tmp_path / "abs_evil"), "evil\x00.json", "..", "/",
            "C:\\evil", "é" * 300, "ранг/../../evil", "."]


def _workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The output folder to give, three levels below ``tmp_path``, with the working directory beside
    it: a path of up to three ``..`` from either still lands inside ``tmp_path``."""
    cwd = tmp_path / "w" / "x" / "cwd"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    return tmp_path / "w" / "x" / "out"


def _tree(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def _written_outside(root: Path, before: set[Path], *allowed: Path) -> list[str]:
    """What appeared under ``root`` since ``before``, outside the ``allowed`` folders."""
    return sorted(str(p.relative_to(root)) for p in _tree(root) - before
                  if not any(p == a or a in p.parents for a in allowed))


def _hostile_trace(src: Path, dst: Path, names: list[str], **distributed: Any) -> Path:
    """``src`` with every name the trace carries set to hostile ones: the trace name, process and
    thread names, device names, process groups, the backend; ``distributed`` goes into distributedInfo."""
    doc = json.loads(src.read_text())
    doc["traceName"] = names[0]
    tracks = sorted({(e["pid"], e["tid"]) for e in doc["traceEvents"] if e.get("ph") == "X"}, key=str)
    meta = []
    for i, (pid, tid) in enumerate(tracks):
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": names[i % len(names)]}})
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": names[-1 - i % len(names)]}})
    doc["traceEvents"] = meta + doc["traceEvents"]
    for device in doc.get("deviceProperties", []):
        device["name"] = names[2]
    info = doc.setdefault("distributedInfo", {})
    info.update(backend=names[1], **distributed)
    for group in info.get("pg_config", []):
        group.update(pg_name=names[0], pg_desc=names[2])
    dst.write_text(json.dumps(doc))
    return dst


def test_batch_writes_only_its_tables_into_its_output_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile names in trace content, in file names, in a capture's metadata.json and in a
    manifest: every file the batch writes is one of its tables, inside --out."""
    out = _workspace(tmp_path, monkeypatch)
    names = _hostile_names(tmp_path)
    arch = tmp_path / "arch"
    (arch / "cap").mkdir(parents=True)
    for r in (0, 1):
        _hostile_trace(SYNTH / f"multi_rank.rank{r}.kineto.json", arch / f"..rank{r}.json", names)
    _hostile_trace(SYNTH / "healthy.kineto.json", arch / "...json", names, rank=names[0], world_size=names[2])
    _hostile_trace(SYNTH / "host_sync.kineto.json", arch / ("é" * 120 + ".json"), names)
    (arch / "..corrupt.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    shutil.copy(SAMPLE_TRACES / "captures" / "slow_dataloader" / "rank0.cycle0.pt.trace.json.gz", arch / "cap")
    (arch / "cap" / "metadata.json").write_text(json.dumps(
        {"world_size": names[0], "ranks": [{"rank": 0, "pid": 1, "trace": n, "traces": names} for n in names]}))
    manifest = tmp_path / "w" / "jobs.txt"
    manifest.write_text(f"# ../../evil\n../arch/cap/../..rank0.json\n{arch / '..rank1.json'}\n../arch/./\n")

    before = _tree(tmp_path)
    assert main(["batch", f"@{manifest}", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    assert _written_outside(tmp_path, before, out) == []
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{s.name}.parquet" for s in BATCH_TABLES] + ["batch.json"])
    traces = pl.read_parquet(out / "traces.parquet")
    assert traces.height == 6  # every hostile file was read (the corrupt one as an error row)
    assert traces["error"].drop_nulls().len() == 1


def test_export_and_annotate_write_only_what_was_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tracekit export` writes its tables into --out, `tracekit annotate` the one file --out names,
    and the cache names its entry after the content's hash, whatever the trace calls itself."""
    out = _workspace(tmp_path, monkeypatch)
    cache = tmp_path / "w" / "cache"
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(cache))
    names = _hostile_names(tmp_path)
    trace = _hostile_trace(SYNTH / "multi_rank.rank0.kineto.json", tmp_path / "..rank0.json", names, rank=names[0])

    before = _tree(tmp_path)
    assert main(["export", str(trace), "--out", str(out / "tables")]) == 0
    assert main(["annotate", str(trace), "--out", str(out / "annotated.json.gz")]) == 0
    assert _written_outside(tmp_path, before, out, cache) == []
    assert sorted(p.name for p in out.iterdir()) == ["annotated.json.gz", "tables"]
    assert sorted(p.name for p in (out / "tables").iterdir()) == sorted([f"{n}.parquet" for n in TABLE_NAMES] + ["info.json"])
    cached = [p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file()]
    assert cached
    tables = "|".join(f"{name}\\.arrow" for name in TABLE_NAMES)
    pattern = rf"traces/[0-9a-f]{{2}}/[0-9a-f]{{40}}/({tables}|complete)|stat/[0-9a-f]{{2}}/[0-9a-f]{{40}}"
    assert all(re.fullmatch(pattern, c) for c in cached), cached


_HOSTILE_PROCESS = """
import json, os, pathlib, sys
out = pathlib.Path(json.loads(os.environ["TRACEKIT_CAPTURE"])["out"])
names = json.loads(sys.argv[1])
(out / ".tracekit").mkdir(parents=True, exist_ok=True)
(out / "rank0.cycle0.pt.trace.json.gz").write_bytes(b"")
window = {"cycle": 0, "first_step": 2, "last_step": 6, "complete": True}
bad = [{"file": n, **window} for n in names]
reports = {10: {"rank": 0, "world_size": 2, "traces": [{"file": "rank0.cycle0.pt.trace.json.gz", **window}, *bad]},
           11: {"rank": names[0], "world_size": names[2], "traces": bad}}
for pid, report in reports.items():
    (out / ".tracekit" / f"process-{pid}.json").write_text(json.dumps({"pid": pid, "steps": 9, **report}))
"""


def test_capture_keeps_what_its_processes_name_inside_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The processes of a capture report their rank and trace files; hostile ones (a rank that is
    a path, trace names outside the folder) are left out of metadata.json, and the wrapper
    writes nothing outside --out, nor outside the folder it picks without --out."""
    out = _workspace(tmp_path, monkeypatch)
    argv = ["--", sys.executable, "-c", _HOSTILE_PROCESS, json.dumps(_hostile_names(tmp_path))]
    before = _tree(tmp_path)
    assert main(["capture", "--out", str(out), *argv]) == 0, capsys.readouterr().err
    assert _written_outside(tmp_path, before, out) == []
    assert sorted(p.name for p in out.iterdir()) == ["metadata.json", "rank0.cycle0.pt.trace.json.gz"]
    meta = json.loads((out / "metadata.json").read_text())
    assert [(r["rank"], r["trace"], r["traces"]) for r in meta["ranks"]] == [
        (0, "rank0.cycle0.pt.trace.json.gz", ["rank0.cycle0.pt.trace.json.gz"])]

    before = _tree(tmp_path)
    assert main(["capture", *argv]) == 0
    (folder,) = [p for p in _tree(tmp_path) - before if p.parent == out.parent / "cwd"]
    assert folder.name.startswith("tracekit-capture-")
    assert _written_outside(tmp_path, before, folder) == []


def test_capture_trace_names_hold_only_a_rank_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the launcher's environment or torch.distributed say the rank is, the trace an
    instrumented process writes is named after a number, in the output folder."""
    out = _workspace(tmp_path, monkeypatch)
    config = CaptureConfig(out=str(out))
    backend = SimpleNamespace(name="torch")
    before = _tree(tmp_path)

    def write(path: str) -> None:
        Path(path).write_bytes(b"{}")

    for hostile in [n for n in _hostile_names(tmp_path) if "\x00" not in n]:  # no NUL in the environment
        monkeypatch.setenv("RANK", hostile)
        monkeypatch.setenv("WORLD_SIZE", hostile)
        dist = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                               get_rank=lambda h=hostile: h, get_world_size=lambda h=hostile: h)
        facts = torch_hooks.process_facts(SimpleNamespace(distributed=dist))
        session = Session(config, backend=backend, ranges=SimpleNamespace(), facts=facts)  # type: ignore[arg-type]
        assert session.save_trace(0, 2, 6, write) == "rank0.cycle0.pt.trace.json.gz"
    monkeypatch.setenv("RANK", "3")
    facts = torch_hooks.process_facts(SimpleNamespace())  # no torch.distributed: the environment decides
    session = Session(config, backend=backend, ranges=SimpleNamespace(), facts=facts)  # type: ignore[arg-type]
    assert session.save_trace(1, 7, 11, write) == "cycle1/rank3.cycle1.pt.trace.json.gz"
    assert _written_outside(tmp_path, before, out) == []
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.gz")) == [
        "cycle1/rank3.cycle1.pt.trace.json.gz", "rank0.cycle0.pt.trace.json.gz"]


# --------------------------------------------------------------------------- the number of workers

#: columns that legitimately differ between two batches of the same files: the wall-clock time of
#: each file's analysis; every path in the tables is an input path, the same for both outputs
RUN_SPECIFIC_COLUMNS = ("seconds",)
#: batch.json keys that describe the run, not its results: when it was written, how long it took,
#: and the number of workers (the setting under test)
RUN_SPECIFIC_SUMMARY = ("written_at", "seconds", "workers")


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    frame = frame.drop([c for c in RUN_SPECIFIC_COLUMNS if c in frame.columns])
    return frame.sort([c for c, dtype in frame.schema.items() if not dtype.is_nested()], nulls_last=True)


@pytest.mark.slow  # test_batch.py::test_process_pool_gives_the_same_tables runs by default
def test_batch_results_do_not_depend_on_the_number_of_workers(tmp_path: Path) -> None:
    """`tracekit batch --workers 1` and `--workers 2` write the same rows (an archive with two
    multi-rank jobs, a duplicate, a corrupt file and a file that is not a trace)."""
    archive = _archive(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    for workers, out in (("1", one), ("2", two)):
        assert main(["batch", str(archive), "--out", str(out), "--workers", workers, "--quiet"]) == 0
    assert pl.read_parquet(one / "jobs.parquet")["n_ranks"].max() == 2
    assert pl.read_parquet(one / "traces.parquet")["error"].drop_nulls().len() == 2
    for schema in BATCH_TABLES:
        a, b = (_canonical(pl.read_parquet(out / f"{schema.name}.parquet")) for out in (one, two))
        # the archive's traces record no operator shapes: no per-operator efficiency rows
        assert a.height > 0 or schema.name == "ops", schema.name
        assert_frame_equal(a, b, check_exact=True)
    summaries = [json.loads((out / "batch.json").read_text()) for out in (one, two)]
    assert [s["workers"] for s in summaries] == [1, 2]
    for s in summaries:
        for key in RUN_SPECIFIC_SUMMARY:
            del s[key]
    assert summaries[0] == summaries[1]
