"""Progress of long work: the headless observer, the bytes the readers report, the phases of the
analysis, and the line the CLI draws on a terminal (a pseudo-terminal here) but never into a pipe."""

from __future__ import annotations

import fcntl
import gzip
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES
from conftest import ProgressRecorder as Recorder

from tracekit.analysis import diagnose
from tracekit.cli._progress import ProgressLine, render_line
from tracekit.progress import Progress, ProgressState
from tracekit.reading.trace import read_trace

TRACE = SAMPLE_TRACES / "synthetic" / "dataloader_stall.kineto.json"
NSYS = SAMPLE_TRACES / "synthetic" / "dataloader_stall.nsys.sqlite"
REPO = Path(__file__).resolve().parent.parent


def test_reading_reports_every_byte_of_the_file_then_the_analysis_phases(tmp_path: Path) -> None:
    rec = Recorder()
    p = Progress(on_update=rec)
    tables = read_trace(TRACE, cache=False, progress=p)
    diagnose(tables, progress=p)
    assert rec.phases() == ["reading", "decoding", "steps", "idle time", "findings", "critical path", "replay", "plan"]
    size = TRACE.stat().st_size
    assert rec.bytes_in("reading") == (size, size)
    # bytes only grow within a phase
    done = [s.done for s in rec.states if s.phase == "reading"]
    assert done == sorted(done)


def test_gzip_counts_compressed_bytes_against_the_file_size(tmp_path: Path) -> None:
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(TRACE.read_bytes()))
    rec = Recorder()
    read_trace(gz, cache=False, progress=Progress(on_update=rec))
    assert rec.bytes_in("reading") == (gz.stat().st_size, gz.stat().st_size)


def test_cached_reads_hash_then_load_and_do_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first read hashes, parses and stores; the second of the unchanged file at the same
    path neither hashes nor parses (its identity is remembered, see tracekit.reading.cache)."""
    import tracekit.reading.cache

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tracekit.reading.cache, "SETTLE_NS", 0)  # however recently the checkout wrote the file
    first = Recorder()
    read_trace(TRACE, progress=Progress(on_update=first))
    assert first.phases() == ["hashing", "loading cached tables", "reading", "decoding", "caching"]
    assert first.bytes_in("hashing") == (TRACE.stat().st_size, TRACE.stat().st_size)
    second = Recorder()
    read_trace(TRACE, progress=Progress(on_update=second))
    assert second.phases() == ["loading cached tables"]


def test_nsight_reports_its_phase_without_a_byte_count() -> None:
    rec = Recorder()
    read_trace(NSYS, cache=False, progress=Progress(on_update=rec))
    assert rec.phases() == ["reading"]
    assert rec.bytes_in("reading") == (0, None)


def test_state_rate_fraction_and_the_rendered_line() -> None:
    now = [0.0]
    p = Progress(clock=lambda: now[0])
    now[0] = 1.0
    p.phase("reading", total=400_000_000)
    now[0] = 5.0
    p.advance(200_000_000)
    s = p.state()
    assert (s.elapsed_s, s.phase_elapsed_s) == (5.0, 4.0)
    assert s.fraction == 0.5
    assert s.rate == pytest.approx(50e6)
    line = render_line(s, 200)
    assert line.startswith("tracekit [==========          ] reading 200.0 MB of 400.0 MB (50%) · 50.0 MB/s")
    assert len(render_line(s, 30)) == 29  # never wider than the terminal: \r must reach the line's start
    assert render_line(ProgressState(None, "critical path", 0, None, 3.0, 1.0), 80) == "tracekit · critical path · 3.0 s"


class _Tty:
    """A text stream that says it is a terminal and records what is written."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> int:
        self.text += s
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True


def test_the_line_waits_for_its_delay_and_is_erased_at_the_end() -> None:
    p = Progress()
    p.phase("steps")
    quick = ProgressLine(p, _Tty(), delay_s=30.0)  # type: ignore[arg-type]
    quick.close()
    assert quick._stream.text == ""  # type: ignore[attr-defined]  # work shorter than the delay draws nothing
    tty = _Tty()
    line = ProgressLine(p, tty, delay_s=0.0, interval_s=0.01)  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while "steps" not in tty.text and time.monotonic() < deadline:
        time.sleep(0.01)
    line.close()
    assert tty.text.startswith("\rtracekit · steps")
    assert tty.text.endswith("\r\x1b[K")


def _run_on_pty(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, bytes]:
    """Run the CLI with stderr on a pseudo-terminal and stdout on a pipe: (exit code, stdout, stderr bytes)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", *args], stdout=subprocess.PIPE, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    err = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                chunk = b""
            if not chunk:
                break
            err += chunk
        elif proc.poll() is not None:
            break
    out = proc.stdout.read().decode() if proc.stdout else ""
    os.close(master)
    return proc.wait(timeout=120), out, err


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TRACEKIT_CACHE_DIR"] = str(tmp_path / "cache")
    env["TRACEKIT_PROGRESS_DELAY"] = "0"  # small traces: draw from the first instant
    env.pop("COLUMNS", None)  # the width comes from the terminal
    return env


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_progress_line_on_a_terminal_and_not_in_a_pipe(tmp_path: Path, cli_env: dict[str, str]) -> None:
    trace = tmp_path / "big.kineto.json"
    shutil.copy(TRACE, trace)
    code, out, err = _run_on_pty(["analyze", str(trace), "--no-cache"], cli_env, REPO)
    assert code == 0
    assert "data_loading" in out or "DataLoader" in out  # the report itself, on stdout
    text = err.decode()
    assert "\rtracekit" in text
    assert "big.kineto.json" in text
    assert text.endswith("\r\x1b[K")  # erased before the report
    assert "\r" not in out
    assert "tracekit [" not in out
    # piped stderr: nothing but what the command always says
    piped = subprocess.run([sys.executable, "-m", "tracekit", "analyze", str(trace), "--no-cache"], capture_output=True,
                           text=True, env=cli_env, cwd=REPO, timeout=120)
    assert piped.returncode == 0
    assert piped.stderr == ""
    assert piped.stdout == out


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("command", ["analyze", "export", "diff", "annotate"])
def test_quiet_turns_the_line_off(tmp_path: Path, cli_env: dict[str, str], command: str) -> None:
    args = {
        "analyze": ["analyze", str(TRACE)],
        "export": ["export", str(TRACE), "--out", str(tmp_path / "tables")],
        "diff": ["diff", str(TRACE), str(TRACE)],
        "annotate": ["annotate", str(TRACE), "--out", str(tmp_path / "a.json")],
    }[command]
    code, _, err = _run_on_pty([*args, "--no-cache"], cli_env, REPO)
    assert code == 0
    assert b"\rtracekit" in err
    code, _, err = _run_on_pty([*args, "--no-cache", "--quiet"], cli_env, REPO)
    assert code == 0
    assert b"\rtracekit" not in err
    assert b"\x1b[K" not in err


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_a_cached_small_trace_does_not_flash_a_line(tmp_path: Path, cli_env: dict[str, str]) -> None:
    env = {k: v for k, v in cli_env.items() if k != "TRACEKIT_PROGRESS_DELAY"}
    env["TRACEKIT_PROGRESS_DELAY"] = "5"  # far longer than a cached open of a small trace takes
    assert _run_on_pty(["analyze", str(TRACE)], env, REPO)[0] == 0  # fills the cache
    code, _, err = _run_on_pty(["analyze", str(TRACE)], env, REPO)
    assert code == 0
    assert b"\rtracekit" not in err


def test_the_tui_loading_bar_hears_phases_and_bytes() -> None:
    from tracekit.tui.loader import load_session

    seen: list[tuple[float, str]] = []
    load_session(TRACE, progress=lambda f, t: seen.append((f, t)), cache=False)
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1.0
    texts = [t for _, t in seen]
    assert any(t.startswith(f"{TRACE.name} · reading") and "of" in t for t in texts)
    assert any("critical path" in t for t in texts)


def test_a_job_folder_reports_each_rank_file(tmp_path: Path) -> None:
    from tracekit.reading.job import read_job

    rec = Recorder()
    folder = SAMPLE_TRACES / "captures" / "ddp_gloo"
    job = read_job(folder, cache=False, progress=Progress(on_update=rec))
    subjects = list(dict.fromkeys(s.subject for s in rec.states if s.subject))
    assert subjects == [Path(r.path).name for r in job.ranks]
    for r in job.ranks:
        last = [s for s in rec.states if s.subject == Path(r.path).name and s.phase == "reading"][-1]
        assert last.done == last.total == Path(r.path).stat().st_size


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_progress_line_for_a_job_folder(cli_env: dict[str, str]) -> None:
    code, out, err = _run_on_pty(["analyze", str(SAMPLE_TRACES / "captures" / "ddp_gloo"), "--no-cache"], cli_env, REPO)
    assert code == 0
    assert "stragglers" in out
    text = err.decode()
    # the rank file being read shows only when its reading outlasts one redraw (timing): the job phase always does
    assert ".cycle0.pt.trace.json.gz · " in text or "ddp_gloo · analyzing" in text
    assert "analyzing 2 ranks" in text
    assert text.endswith("\r\x1b[K")
