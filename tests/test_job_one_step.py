"""One-step jobs (a ``schedule(active=1)`` capture): the job model across ranks within the step,
held to the multi-rank simulator's truth (tests/loopsim/jobsim.py).

Each job is simulated for several steps and written as one profiled step per rank
(:func:`~loopsim.jobsim.one_step`); the truth of the job step and of every job-level fix is the
simulated step itself (the fix re-simulated), never read from the analysis.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from loopsim.jobsim import (
    JobSpec,
    _base,
    fix_rank,
    free_communication,
    half_buckets,
    one_step,
    simulate_job,
    step_truth_ns,
    straggler_at_median,
    write_job,
)
from loopsim.loop import Loop

from tracekit.analysis.diagnose import diagnose_job
from tracekit.analysis.job_replay import ONE_STEP_NOTE
from tracekit.analysis.job_results import JobDiagnosis
from tracekit.reading.job import read_job
from tracekit.report.formatting import ONE_STEP_BASIS
from tracekit.report.json_report import job_to_json_dict
from tracekit.report.text import render_job_text

#: the profiled step (a steady one: the first steps warm the DataLoader up)
STEP = 4
WORLD = 8


def _slow_loader() -> Loop:
    return _base(num_workers=0, load_ns=9_000_000, pinned=False, non_blocking=False, batch_bytes=4 << 20)


#: eight ranks; rank 7 builds its batches on the main thread; kernels jitter by up to 5%
STRAGGLER = JobSpec(
    "one_step_straggler",
    (*(_base() for _ in range(WORLD - 1)), _slow_loader()),
    jitter=0.05,
    clock_offsets=tuple((r - 3) * 1_000_000 for r in range(WORLD)),
)
#: eight equal ranks, the same jitter: no rank is slow
EVEN = JobSpec("one_step_even", tuple(_base() for _ in range(WORLD)), jitter=0.05)
#: the straggler job with DDP's side-stream all-reduces
OVERLAPPED = dataclasses.replace(STRAGGLER, name="one_step_overlapped", overlap=True, clock_offsets=())


def _diagnosed(spec: JobSpec, tmp_path: Path) -> JobDiagnosis:
    folder = write_job(one_step(simulate_job(spec), STEP), tmp_path / spec.name)
    return diagnose_job(read_job(folder, cache=False))


def _truth_ms(spec: JobSpec) -> float:
    return step_truth_ns(simulate_job(spec), STEP) / 1e6


def _fixed(spec: JobSpec, kind: str, rank: int | None, cause: str | None) -> JobSpec:
    """The job with the what-if's fix applied to the program."""
    if kind == "straggler_at_median" and rank is not None:
        return straggler_at_median(spec, rank, 0 if rank else 1)
    if kind == "perfect_overlap":
        return free_communication(spec)
    if kind == "half_collectives":
        return half_buckets(spec)
    assert kind == "cause_on_rank"
    assert rank is not None
    assert cause is not None
    return fix_rank(spec, rank, cause)


@pytest.mark.parametrize("spec", [STRAGGLER, EVEN, OVERLAPPED], ids=lambda s: s.name)
def test_one_step_job_step_and_what_ifs_match_the_simulation(spec: JobSpec, tmp_path: Path) -> None:
    jd = _diagnosed(spec, tmp_path)
    m = jd.model
    assert m is not None
    assert m.one_step
    assert m.steps == 1
    assert ONE_STEP_NOTE in m.notes
    truth = _truth_ms(spec)
    assert m.step_ms == pytest.approx(truth, rel=1e-3)
    assert m.replayed_step_ms == pytest.approx(truth, rel=1e-3)
    # the path runs from a step start to a step end: its parts add up to the job step
    assert float(m.path["ms_per_step"].sum()) == pytest.approx(truth, rel=0.01)
    assert m.what_ifs
    for w in m.what_ifs:
        want = _truth_ms(_fixed(spec, w.kind, w.rank, w.cause))
        tolerance = 0.03 if spec.overlap else 0.01
        assert w.predicted_step_ms == pytest.approx(want, rel=tolerance), (w.label, w.predicted_step_ms, want)


def test_the_slow_rank_is_the_straggler_and_on_the_path(tmp_path: Path) -> None:
    jd = _diagnosed(STRAGGLER, tmp_path)
    m = jd.model
    assert m is not None
    assert jd.multirank.stragglers == (WORLD - 1,)
    assert m.bottleneck is not None
    on_path = {(r["rank"], r["cause"]) for r in m.path.iter_rows(named=True)}
    assert (WORLD - 1, "data_loading") in on_path
    # 9 ms of main-thread loading on rank 7 per step: all of it before its first all-reduce
    loading = m.path.filter((m.path["rank"] == WORLD - 1) & (m.path["cause"] == "data_loading"))
    assert float(loading["ms_per_step"][0]) == pytest.approx(9.0, rel=0.01)
    top = m.what_ifs[0]
    assert top.rank == WORLD - 1
    kinds = [f.kind for f in jd.multirank.findings]
    assert kinds[0] == "straggler"
    assert jd.multirank.findings[0].evidence["straggler_ranks"] == [WORLD - 1]


def test_jitter_alone_makes_no_straggler_in_one_step(tmp_path: Path) -> None:
    jd = _diagnosed(EVEN, tmp_path)
    assert jd.multirank.stragglers == ()
    assert "straggler" not in {f.kind for f in jd.multirank.findings}
    assert any("one step per rank" in n for n in jd.multirank.notes)


def test_reports_say_what_one_step_measures(tmp_path: Path) -> None:
    jd = _diagnosed(STRAGGLER, tmp_path)
    text = render_job_text(jd)
    assert f"job step {jd.model.step_ms:,.2f} ms {ONE_STEP_BASIS}" in text  # type: ignore[union-attr]
    assert "the job step cannot be measured" not in text
    assert "one step cannot show how the step varies" in text
    model = job_to_json_dict(jd)["job"]["model"]
    assert model["step_basis"] == "one_step"
    assert model["critical_path"]
    assert model["what_ifs"]
