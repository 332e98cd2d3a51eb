"""A step that is mostly idle always gets a finding: idle time nothing recorded explains is the
``untraced_idle`` finding, with what the trace does know about it.

The expected numbers come from simulating the loop (tests/loopsim): a collector-like pause of
untraced host time at the start of every step, after a ``loss.item()`` that drained the GPU, is
idle time of exactly the pause's length that no recorded event explains.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from conftest import shared_trace

import tracekit
from tracekit.analysis import Diagnosis, diagnose
from tracekit.analysis.causes import FINDING_BY_NAME
from tracekit.analysis.causes.evidence import IDLE_DOMINATES
from tracekit.report.formatting import evidence_text
from tracekit.report.json_report import to_json_dict
from tracekit.report.text import render_text

from .loopsim import Loop, simulate, write_kineto

PAUSE_NS = 200_000_000


def _run(tmp_path: Path, loop: Loop) -> tuple[Diagnosis, float]:
    run = simulate(loop)
    path = write_kineto(run, tmp_path / f"{loop.name}.json")
    return diagnose(tracekit.read_trace(path, cache=False)), run.steady_step_ns / 1e6


def test_an_untraced_pause_after_a_sync_is_found_at_its_length(tmp_path: Path) -> None:
    loop = Loop("paused", steps=6, layers=2, gc_every=1, gc_ns=PAUSE_NS, step_sync="item")
    d, step_ms = _run(tmp_path, loop)
    assert d.step_ms_median == pytest.approx(step_ms, abs=1e-6)
    assert d.gpu_utilization is not None
    assert 1 - d.gpu_utilization >= IDLE_DOMINATES
    top = d.findings[0]
    assert top.kind == "untraced_idle"
    # the GPU drained at the step's loss.item(): the whole pause is idle and unexplained, and so
    # is the untraced Python before the step's first operator
    untraced_ms = (PAUSE_NS + loop.python_ns) / 1e6
    assert top.ms_per_step == pytest.approx(untraced_ms, abs=1e-6)
    assert top.share_of_step == pytest.approx(untraced_ms / step_ms, abs=1e-9)
    # its fix is to record the time: no model prices it, no step is predicted
    assert top.predicted_step_ms is None
    assert top.modelled_fix is None
    assert not FINDING_BY_NAME["untraced_idle"].priced
    ev = top.evidence
    assert ev["idle_share"] == pytest.approx(1 - d.gpu_utilization, abs=1e-4)
    assert ev["untraced_share"] == pytest.approx(top.share_of_step, abs=1e-4)
    # recorded host events cover the step but the pause (and the untraced Python between ops)
    assert 1 - PAUSE_NS / 1e6 / step_ms - 0.01 < ev["host_recorded_share"] <= 1 - PAUSE_NS / 1e6 / step_ms + 1e-4
    assert ev["compiled_regions"] == []
    assert ev["compile_events"] == []
    assert ev["python_stacks"] is False
    line = evidence_text(top)
    assert "no Python stacks (with_stack=False)" in line
    assert "with_stack=True" in top.fix
    assert "untraced_idle" in render_text(d)
    data = to_json_dict(d)
    assert data["findings"][0]["kind"] == "untraced_idle"
    assert data["findings"][0]["predicted_step_ms"] is None


def test_a_busy_or_explained_step_has_no_untraced_idle_finding(tmp_path: Path) -> None:
    # the same pause hidden by a GPU that stays busy: not mostly idle
    busy, _ = _run(tmp_path, Loop("busy", steps=6, layers=8, gemm_ns=30_000_000, gc_every=1, gc_ns=20_000_000))
    assert busy.gpu_utilization is not None
    assert busy.gpu_utilization > 1 - IDLE_DOMINATES
    assert "untraced_idle" not in {f.kind for f in busy.findings}
    # mostly idle, but the idle time is the DataLoader's: that finding explains it
    loading, _ = _run(tmp_path, Loop("loading", steps=6, layers=2, load_ns=200_000_000, step_sync="item"))
    assert loading.gpu_utilization is not None
    assert 1 - loading.gpu_utilization >= IDLE_DOMINATES
    kinds = [f.kind for f in loading.findings]
    assert kinds[0] == "data_loading"
    assert "untraced_idle" not in kinds


def test_the_torch_compile_step_says_what_is_known() -> None:
    """The real torch.compile trace: one 13.3 s step, GPU 0.0% busy, all of it unattributed idle;
    the finding names the compiled region, that its compilation is not recorded, that recorded
    host events end 1.5 ms into the step, and that there are no Python stacks."""
    path = shared_trace("hta/tests/data/triton_example/triton_example.json.gz")
    d = diagnose(tracekit.read_trace(path, cache=False))
    assert d.breakdown["unattributed"] == pytest.approx(1.0, abs=1e-3)
    assert [f.kind for f in d.findings] == ["untraced_idle"]
    f = d.findings[0]
    assert f.ms_per_step == pytest.approx(d.breakdown_ms["unattributed"])
    assert f.predicted_step_ms is None
    ev = f.evidence
    assert ev["compiled_regions"] == [{"name": "Torch-Compiled Region: 0/0", "count": 1, "total_ms": 1.353}]
    assert ev["compile_events"] == []
    assert ev["last_host_event_ms"] == pytest.approx(1.53, abs=0.01)
    assert ev["host_recorded_share"] < 0.001
    line = evidence_text(f)
    assert "torch.compile region Torch-Compiled Region: 0/0 ×1" in line
    assert "its compilation is not recorded" in line
    assert "the last ends 1.53 ms into the step" in line
    out = render_text(d)
    assert "No findings" not in out
    assert "profile steps after it" in out


def test_every_mostly_idle_real_trace_gets_a_finding() -> None:
    """The rule on the real traces whose steps are mostly idle and mostly unexplained (each of
    them reported "No findings" before)."""
    names = [
        "hta/tests/data/call_stack/backward_thread.json",
        "hta/tests/data/trace_compare/base/base.json.gz",
        "hta/tests/data/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
        "hta/tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    ]
    for name in names:
        d = diagnose(tracekit.read_trace(shared_trace(name), cache=False))
        assert d.gpu_utilization is not None
        assert 1 - d.gpu_utilization >= IDLE_DOMINATES, name
        assert d.findings, name
        per = d.timeline.per_step
        assert per.filter(pl.col("unattributed_ns") > 0).height, name
