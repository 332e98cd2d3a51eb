"""`tracekit batch` under faults: a worker killed by the OS, a worker over the memory limit, a batch
killed before it wrote its tables (the journal), and the size option.

The faults are real: a worker process SIGKILLs itself, or writes a gigabyte of memory, for one
file chosen through the test hook TRACEKIT_BATCH_TEST_FAULT; the driver never learns which file
it was except from the dead worker.  Truth is a clean batch over the same files."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import SAMPLE_TRACES

from tracekit.batch import run_batch, runner
from tracekit.batch.engines import FAULT_ENV, parse_size
from tracekit.batch.store import JOURNAL_DIR
from tracekit.cli import main
from tracekit.errors import UsageError

SYNTH = SAMPLE_TRACES / "synthetic"
REPO = Path(__file__).resolve().parent.parent


def _archive(root: Path) -> Path:
    a = root / "archive"
    (a / "job1").mkdir(parents=True)
    for r in (0, 1):
        shutil.copy(SYNTH / f"multi_rank.rank{r}.kineto.json", a / "job1" / f"train_rank{r}.json")
    shutil.copy(SYNTH / "dataloader_stall.nsys.sqlite", a / "stall.sqlite")
    shutil.copy(SYNTH / "healthy.kineto.json", a / "healthy.json")
    shutil.copy(SYNTH / "host_sync.kineto.json", a / "host_sync.json")
    return a


def _without(frame: pl.DataFrame, victim: str) -> pl.DataFrame:
    frame = frame.drop([c for c in ("seconds",) if c in frame.columns])
    if "path" in frame.columns:
        frame = frame.filter(pl.col("path").is_null() | ~pl.col("path").str.ends_with(victim))
    if "job" in frame.columns:
        frame = frame.filter(pl.col("job").is_null() | (pl.col("job") != victim))
    return frame


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, pl.DataFrame]]:
    root = tmp_path_factory.mktemp("truth")
    a = _archive(root)
    return a, run_batch([str(a)], root / "out", workers=1).tables


def test_a_worker_killed_by_the_os_costs_only_its_file(tmp_path: Path, truth: tuple[Path, dict[str, pl.DataFrame]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a, expected = truth
    monkeypatch.setenv(FAULT_ENV, "kill:stall.sqlite")
    res = run_batch([str(a)], tmp_path / "out", workers=2)
    traces = res.tables["traces"]
    assert traces.height == 5
    victim = traces.filter(pl.col("path").str.ends_with("stall.sqlite")).row(0, named=True)
    assert victim["error_kind"] == "worker_crash"
    assert "killed by SIGKILL" in victim["error"]
    assert res.failed == 1
    # every other file's rows are exactly those of a clean batch
    for name in expected:
        assert _without(res.tables[name], "stall.sqlite").equals(_without(expected[name], "stall.sqlite")), name
    # a crash is not kept: the next run analyses that file again, and only it
    monkeypatch.delenv(FAULT_ENV)
    again = run_batch([str(a)], tmp_path / "out", workers=1)
    assert (again.analysed, again.reused) == (1, 4)
    for name in expected:
        assert _without(again.tables[name], "-").equals(_without(expected[name], "-")), name


def test_a_file_over_the_memory_limit_gets_an_error_row(tmp_path: Path, truth: tuple[Path, dict[str, pl.DataFrame]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a, expected = truth
    # a worker holds ~110 MB with tracekit and polars loaded; this file's worker writes 1 GiB more
    monkeypatch.setenv(FAULT_ENV, "balloon:host_sync.json:1024")
    t0 = time.monotonic()
    res = run_batch([str(a)], tmp_path / "out", workers=1, max_memory_per_file=parse_size("700M"))
    assert time.monotonic() - t0 < 55  # killed by the watchdog, not after the balloon's minute
    traces = res.tables["traces"]
    victim = traces.filter(pl.col("path").str.ends_with("host_sync.json")).row(0, named=True)
    assert victim["error_kind"] == "memory_limit"
    assert "over the limit of 700 MiB (--max-memory-per-file)" in victim["error"]
    assert res.failed == 1
    for name in expected:
        assert _without(res.tables[name], "host_sync.json").equals(_without(expected[name], "host_sync.json")), name


def _disk_full(*_: object) -> list[Path]:
    raise OSError("No space left on device")


def _group_alive(pgid: int, wait_s: float = 10.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    return True


def _journal(out: Path) -> list[Path]:
    folder = out / JOURNAL_DIR
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []


def test_a_killed_batch_resumes_from_its_journal(tmp_path: Path, truth: tuple[Path, dict[str, pl.DataFrame]]) -> None:
    a, expected = truth
    out = tmp_path / "out"
    env = dict(os.environ)
    env[FAULT_ENV] = "stall:healthy.json"  # one worker never finishes: the batch is still running when killed
    script = (
        "import sys\nfrom tracekit.batch import run_batch\n"
        "if __name__ == '__main__':\n    run_batch([sys.argv[1]], sys.argv[2], workers=2, checkpoint_s=3600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(a), str(out)], env=env, cwd=REPO, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while len(_journal(out)) < 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers, as a lost machine would
        proc.wait()
    entries = _journal(out)
    assert len(entries) == 4, "the four other files were analysed and journalled before the kill"
    assert not (out / "traces.parquet").exists()  # no checkpoint was written: only the journal holds them
    # a damaged entry and a half-written one are ignored, not trusted
    (entries[0] / "steps.arrow").write_bytes(b"ARROW1 cut")
    (out / JOURNAL_DIR / ".tmp-half").mkdir()
    resumed = run_batch([str(a)], out, workers=1)
    assert (resumed.analysed, resumed.reused) == (2, 3)
    for name in expected:
        assert _without(resumed.tables[name], "-").equals(_without(expected[name], "-")), name
    assert not (out / JOURNAL_DIR).exists()  # the tables hold everything: the journal is emptied


def test_the_journal_keeps_results_when_the_tables_cannot_be_written(tmp_path: Path, truth: tuple[Path, dict[str, pl.DataFrame]],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    a, expected = truth
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "write_outputs", _disk_full)
    with pytest.raises(OSError, match="No space"):
        run_batch([str(a)], out, workers=1)
    monkeypatch.undo()
    assert len(_journal(out)) == 5
    resumed = run_batch([str(a)], out, workers=1)
    assert (resumed.analysed, resumed.reused) == (0, 5)
    for name in expected:
        assert _without(resumed.tables[name], "-").equals(_without(expected[name], "-")), name


def test_force_empties_the_journal(tmp_path: Path, truth: tuple[Path, dict[str, pl.DataFrame]], monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = truth
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "write_outputs", _disk_full)
    with pytest.raises(OSError, match="No space"):
        run_batch([str(a / "job1")], out, workers=1)
    monkeypatch.undo()
    assert len(_journal(out)) == 2
    assert run_batch([str(a / "job1")], out, workers=1, incremental=False).analysed == 2


def test_memory_sizes_and_the_cli_option(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_size("8G") == 8 << 30
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("1.5 GB") == 3 << 29
    assert parse_size("2048") == 2048
    for bad in ("", "lots", "-1G", "0", "4X"):
        with pytest.raises(UsageError, match="not a size"):
            parse_size(bad)
    a = _archive(tmp_path)
    assert main(["batch", str(a / "job1"), "--out", str(tmp_path / "o"), "--max-memory-per-file", "many"]) == 2
    assert "not a size: 'many'" in capsys.readouterr().err
    assert main(["batch", str(a / "job1"), "--out", str(tmp_path / "o"), "--engine", "ray", "--max-memory-per-file", "4G"]) == 2
    assert "applies to the local engine" in capsys.readouterr().err
    monkeypatch.setattr("tracekit.batch.engines.resident_bytes", lambda _pid: None)  # a system without /proc
    with pytest.raises(UsageError, match="Linux only"):
        run_batch([str(a / "job1")], tmp_path / "o3", max_memory_per_file=1 << 30)


def test_a_file_that_kills_the_single_process_batch_is_isolated_on_the_rerun(
    tmp_path: Path, truth: tuple[Path, dict[str, pl.DataFrame]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one worker the batch analyses files in its own process: a file that gets it killed must not
    kill every rerun too (largest first, it would come first again)."""
    a, expected = truth
    out = tmp_path / "out"
    env = dict(os.environ)
    env[FAULT_ENV] = "kill:train_rank0.json"
    script = "import sys\nfrom tracekit.batch import run_batch\nrun_batch([sys.argv[1]], sys.argv[2], workers=1)\n"
    killed = subprocess.run([sys.executable, "-c", script, str(a), str(out)], env=env, cwd=REPO, timeout=300, check=False)
    assert killed.returncode == -signal.SIGKILL
    # the file still kills whatever analyses it; the rerun runs in a process of its own too, so that
    # a regression fails this test instead of killing the test runner
    rerun = subprocess.run([sys.executable, "-c", script, str(a), str(out)], env=env, cwd=REPO, timeout=300, check=False)
    assert rerun.returncode == 0
    tables = {name: pl.read_parquet(out / f"{name}.parquet") for name in ("traces", "findings", "steps")}
    victim = tables["traces"].filter(pl.col("path").str.ends_with("train_rank0.json")).row(0, named=True)
    assert victim["error_kind"] == "worker_crash"
    assert "killed by SIGKILL" in victim["error"]
    assert tables["traces"].filter(pl.col("error").is_null()).height == 4
    # the rank-1 file now forms a job of its own: compare the files that are not of that job
    for name in ("traces", "findings", "steps"):
        got = tables[name].filter(pl.col("path").is_not_null() & ~pl.col("path").str.contains("train_rank"))
        want = expected[name].filter(pl.col("path").is_not_null() & ~pl.col("path").str.contains("train_rank"))
        assert _without(got, "-").equals(_without(want, "-")), name


@pytest.mark.slow  # test_batch.py::test_interrupted_batch_keeps_what_was_done runs by default
def test_ctrl_c_stops_the_workers_keeps_the_results_and_says_how_to_resume(tmp_path: Path,
                                                                            truth: tuple[Path, dict[str, pl.DataFrame]]) -> None:
    a, expected = truth
    out = tmp_path / "out"
    env = dict(os.environ)
    env[FAULT_ENV] = "stall:healthy.json"
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "batch", str(a), "--out", str(out), "-j", "2"], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while len(_journal(out)) < 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group, workers included
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert not _group_alive(proc.pid), "the workers were stopped with the batch"
    assert "run the same command again to resume" in err
    assert "Traceback" not in err
    traces = pl.read_parquet(out / "traces.parquet")  # the Ctrl-C checkpoint
    assert traces.height == 4
    resumed = run_batch([str(a)], out, workers=1)
    assert (resumed.analysed, resumed.reused) == (1, 4)
    for name in expected:
        assert _without(resumed.tables[name], "-").equals(_without(expected[name], "-")), name


def test_a_journal_entry_round_trips_every_field(tmp_path: Path) -> None:
    import datetime as dt

    from tracekit.batch.store import Journal
    from tracekit.batch.work import Task, analyze_file

    path = SYNTH / "dataloader_stall.kineto.json"
    r = analyze_file(Task(path=str(path), content_hash="ab" * 20, size_bytes=path.stat().st_size, mtime_ns=1))
    assert r.ok
    assert r.steps.height > 0
    r.trace["captured_at"] = dt.datetime(2026, 11, 24, 4, 0, 0, 123456, tzinfo=dt.timezone.utc)  # an epoch-clock trace's
    journal = Journal(tmp_path)
    assert journal.add(r)
    back = journal.load()["ab" * 20]
    assert back.trace == r.trace
    assert (back.findings, back.ranks) == (r.findings, r.ranks)
    assert back.steps.equals(r.steps)
    assert back.collectives.equals(r.collectives)
    assert (back.path, back.size_bytes, back.mtime_ns, back.seconds, back.error) == (r.path, r.size_bytes, 1, r.seconds, None)
