"""scripts/ci_perf_check, the pull-request recipe of docs/ci.md, on two shipped traces (no capture)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "ci_perf_check"
SYNTH = REPO / "sample_traces" / "synthetic"
STALL, FIXED = SYNTH / "dataloader_stall.kineto.json", SYNTH / "dataloader_fixed.kineto.json"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the script is a bash script")


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("tracekit")
    env = {**os.environ, "TRACEKIT": str(exe) if exe.exists() else "tracekit"}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_faster_change_passes_and_writes_the_report(tmp_path: Path) -> None:
    done = _check(tmp_path, "--baseline", str(STALL), "--trace", str(FIXED), "--report", "perf.md")
    assert done.returncode == 0, done.stderr
    report = (tmp_path / "perf.md").read_text(encoding="utf-8")
    assert report.startswith("## tracekit diff: faster: -38.00 ms per step (-38.0%)")
    assert "within 5% of the baseline" in done.stdout


def test_slower_change_fails_with_the_report(tmp_path: Path) -> None:
    done = _check(tmp_path, "--baseline", str(FIXED), "--trace", str(STALL), "--fail-if-slower", "5")
    assert done.returncode == 1
    assert "tracekit: slower: median step time 62.01 ms -> 100.01 ms (+61.3%)" in done.stderr
    assert (tmp_path / "tracekit-perf.md").read_text(encoding="utf-8").startswith("## tracekit diff: slower")


def test_baseline_is_stored_only_when_asked(tmp_path: Path) -> None:
    baseline = tmp_path / "perf" / "baseline.kineto.json"
    missing = _check(tmp_path, "--baseline", str(baseline), "--trace", str(STALL))
    assert missing.returncode == 2
    assert "no baseline at" in missing.stderr
    stored = _check(tmp_path, "--baseline", str(baseline), "--trace", str(STALL), "--update-baseline")
    assert stored.returncode == 0, stored.stderr
    assert baseline.read_bytes() == STALL.read_bytes()
    # a passing check with --update-baseline moves the baseline on to the new trace
    assert _check(tmp_path, "--baseline", str(baseline), "--trace", str(FIXED), "--update-baseline").returncode == 0
    assert baseline.read_bytes() == FIXED.read_bytes()


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    assert _check(tmp_path, "--trace", str(STALL)).returncode == 2
    assert _check(tmp_path, "--baseline", str(STALL)).returncode == 2
    both = _check(tmp_path, "--baseline", str(STALL), "--trace", str(FIXED), "--", "python", "x.py")
    assert both.returncode == 2
    assert "not both" in both.stderr
    unreadable = _check(tmp_path, "--baseline", str(STALL), "--trace", str(tmp_path / "nope.json"))
    assert unreadable.returncode == 3
