"""The job model (tracekit/analysis/job_replay.py) held to the multi-rank simulator's truth
(tests/loopsim/jobsim.py): each job-level fix is re-simulated, never derived from the model."""

from __future__ import annotations

import dataclasses
import json
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from conftest import SAMPLE_TRACES, shared_trace
from loopsim.fixes import FIXES
from loopsim.jobsim import (
    JOBS,
    JobRun,
    JobSpec,
    fix_rank,
    free_communication,
    half_buckets,
    simulate_job,
    straggler_at_median,
    write_job,
)

from tracekit.analysis.diagnose import diagnose_job
from tracekit.analysis.job_model import JobModel
from tracekit.analysis.job_replay import model_job
from tracekit.analysis.job_results import JobDiagnosis
from tracekit.analysis.multirank import COLLECTIVES_SCHEMA, MATCH_KEY, MATCHING, match_collectives
from tracekit.cli import main
from tracekit.reading.job import read_job


@dataclasses.dataclass(frozen=True)
class Case:
    spec: JobSpec
    run: JobRun
    jd: JobDiagnosis

    @property
    def model(self) -> JobModel:
        assert self.jd.model is not None
        return self.jd.model


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    out = {}
    for name, spec in JOBS.items():
        run = simulate_job(spec)
        folder = write_job(run, tmp_path_factory.mktemp(name))
        out[name] = Case(spec, run, diagnose_job(read_job(folder, cache=False)))
    return out


def _truth_spec(spec: JobSpec, kind: str, rank: int | None, cause: str | None) -> JobSpec | None:
    """The job with the what-if's fix applied to the program (None: no program edit for it)."""
    if kind == "straggler_at_median" and rank is not None:
        typical = next(r for r in range(spec.world_size) if r != rank and spec.loops[r] == spec.loops[0 if rank else 1])
        return straggler_at_median(spec, rank, typical)
    if kind == "perfect_overlap":
        return free_communication(spec)
    if kind == "half_collectives":
        return half_buckets(spec)
    if kind in ("cause_on_rank", "cause_everywhere") and cause in FIXES:
        ranks = [rank] if kind == "cause_on_rank" and rank is not None else list(range(spec.world_size))
        for r in ranks:
            spec = fix_rank(spec, r, cause)
        return spec
    return None


def test_replay_reproduces_the_simulated_job_step(cases: dict[str, Case]) -> None:
    for name, c in cases.items():
        m = c.model
        assert m.step_ms is not None, name
        assert m.replayed_step_ms is not None, name
        truth_ms = c.run.steady_step_ns / 1e6
        assert abs(m.step_ms - truth_ms) / truth_ms < 0.01, (name, m.step_ms, truth_ms)
        assert m.error is not None, name
        assert m.error < 0.01, (name, m.error)
        assert m.matched_collectives == c.spec.buckets * c.spec.loops[0].steps, name


def test_job_what_ifs_match_the_resimulated_job(cases: dict[str, Case]) -> None:
    errors: list[float] = []
    kinds: set[str] = set()
    rows = []
    for name, c in cases.items():
        for w in c.model.what_ifs:
            spec = _truth_spec(c.spec, w.kind, w.rank, w.cause)
            if spec is None:
                continue
            truth_ms = simulate_job(spec).steady_step_ns / 1e6
            err = abs(w.predicted_step_ms - truth_ms) / truth_ms
            rows.append((name, w.label, round(w.predicted_step_ms, 3), round(truth_ms, 3), round(err, 4)))
            errors.append(err)
            kinds.add(w.kind)
    assert {"straggler_at_median", "cause_on_rank", "perfect_overlap", "half_collectives"} <= kinds, rows
    assert statistics.mean(errors) <= 0.05, rows
    assert max(errors) <= 0.10, rows


def test_what_ifs_are_ranked_by_job_saving(cases: dict[str, Case]) -> None:
    for c in cases.values():
        savings = [w.saving_ms for w in c.model.what_ifs]
        assert savings == sorted(savings, reverse=True)
        assert all(w.predicted_step_ms <= (c.model.step_ms or 0) + 1e-9 for w in c.model.what_ifs)


def _path(m: JobModel) -> dict[tuple[int | None, str], float]:
    return {(r["rank"], r["cause"]): r["ms_per_step"] for r in m.path.iter_rows(named=True)}


def test_path_names_the_slow_loader(cases: dict[str, Case]) -> None:
    m = cases["slow_loader"].model
    path = _path(m)
    loading = {rank: ms for (rank, cause), ms in path.items() if cause == "data_loading"}
    # rank 3 builds each batch in 9 ms on its main thread; no other rank's loading is on the path
    assert set(loading) == {3}
    assert loading[3] == pytest.approx(9.0, rel=0.05)
    waits = {r["rank"]: r for r in m.waits.iter_rows(named=True)}
    for r in (0, 1, 2):
        assert waits[r]["waits_for"] == 3
        assert waits[r]["wait_ms_per_step"] > 5.0
    fix = m.what_if("data_loading@rank3")
    assert fix is not None
    assert fix.saving_ms > 5.0
    # fixing the loader on a rank that waits anyway buys nothing
    assert all(w.saving_ms < 0.1 for w in m.what_ifs if w.kind == "cause_on_rank" and w.rank != 3)


def test_path_names_the_slow_gpu(cases: dict[str, Case]) -> None:
    m = cases["slow_gpu"].model
    assert m.bottleneck == (1, "compute")
    assert m.what_ifs[0].kind == "straggler_at_median"
    assert m.what_ifs[0].rank == 1
    waits = {r["rank"]: r for r in m.waits.iter_rows(named=True)}
    assert all(waits[r]["waits_for"] == 1 for r in (0, 2, 3))
    assert waits[1]["wait_ms_per_step"] < 0.1


def test_unoverlapped_communication_tops_the_path(cases: dict[str, Case]) -> None:
    m = cases["unoverlapped"].model
    comm = _path(m)[(None, "communication")]
    # 8 all-reduces of 64 MiB at 40 GB/s plus 150 µs each
    expected = 8 * (150_000 + (64 << 20) / 40.0) / 1e6
    assert comm == pytest.approx(expected, rel=0.02)
    assert m.what_ifs[0].kind == "perfect_overlap"


def test_clock_offsets_are_recovered_and_reported(cases: dict[str, Case]) -> None:
    for name in ("slow_loader", "mixed"):
        c = cases[name]
        got = dict(zip(*c.model.clocks.select("rank", "clock_offset_ms").to_dict(as_series=False).values(), strict=True))
        planted = c.spec.clock_offsets
        for r in range(1, c.spec.world_size):
            assert got[r] - got[0] == pytest.approx((planted[r] - planted[0]) / 1e6, abs=0.05), (name, r)
        assert c.model.clock_residual_us is not None
        assert c.model.clock_residual_us < 50


def test_missing_rank_is_reported(tmp_path: Path) -> None:
    write_job(simulate_job(JOBS["slow_gpu"]), tmp_path)
    (tmp_path / "rank2.pt.trace.json").unlink()
    jd = diagnose_job(read_job(tmp_path, cache=False))
    assert jd.model is not None
    assert jd.model.missing_ranks == (2,)
    assert any("missing: 2" in n for n in jd.model.notes)
    assert jd.model.bottleneck == (1, "compute")


# --------------------------------------------------------------------------- hand-built model


def _coll(rows: list[tuple[int, int, int, int, int]]) -> pl.DataFrame:
    """(rank, step, seq, start, end) of all-reduce kernels."""
    return pl.DataFrame(
        {
            "rank": [r[0] for r in rows], "step": [r[1] for r in rows], "op": ["allreduce"] * len(rows), "seq": [r[2] for r in rows],
            "name": ["ncclKernel_AllReduce"] * len(rows), "device": [0] * len(rows), "stream": [7] * len(rows),
            "start_ns": [r[3] for r in rows], "end_ns": [r[4] for r in rows], "dur_ns": [r[4] - r[3] for r in rows],
            "group": [""] * len(rows), "group_seq": [None] * len(rows), "group_order": [r[2] for r in rows],
        }
    ).cast(COLLECTIVES_SCHEMA)  # type: ignore[arg-type]


def _grouped(rows: list[tuple[int, int, str, int | None, int, int]]) -> pl.DataFrame:
    """(rank, step, group, recorded sequence number, start, end) of all-reduce kernels; the
    order columns are numbered as :func:`tracekit.analysis.multirank._collectives` does."""
    frame = pl.DataFrame(
        {
            "rank": [r[0] for r in rows], "step": [r[1] for r in rows], "op": ["allreduce"] * len(rows),
            "group": [r[2] for r in rows], "group_seq": [r[3] for r in rows],
            "name": ["ncclKernel_AllReduce"] * len(rows), "device": [0] * len(rows), "stream": [7] * len(rows),
            "start_ns": [r[4] for r in rows], "end_ns": [r[5] for r in rows], "dur_ns": [r[5] - r[4] for r in rows],
        },
        schema_overrides={"group_seq": pl.Int64},
    ).sort("rank", "step", "start_ns")
    frame = frame.with_columns(
        pl.int_range(pl.len()).over("rank", "step", "op").alias("seq"),
        pl.int_range(pl.len()).over("rank", "step", "op", "group").alias("group_order"),
    )
    return frame.select(list(COLLECTIVES_SCHEMA)).cast(COLLECTIVES_SCHEMA)  # type: ignore[arg-type]


def _pairs(coll: pl.DataFrame) -> set[tuple[tuple[int, int], ...]]:
    """The collectives as matched: per key, the (rank, start) of each member (keys on 2+ ranks)."""
    m = match_collectives(coll)
    groups = m.group_by(list(MATCH_KEY)).agg(pl.struct("rank", "start_ns").sort_by("rank").alias("_m"))
    return {tuple((int(x["rank"]), int(x["start_ns"])) for x in members) for members in groups["_m"].to_list() if len(members) > 1}


def test_collectives_match_within_their_process_group() -> None:
    # rank 0 is in a tensor-parallel group with rank 1 ("1") and a data-parallel group with
    # rank 2 ("2"); per operation and step, order alone would join rank 0's first all-reduce
    # (tensor-parallel) with rank 2's (data-parallel) and leave rank 0's second one unmatched
    rows: list[tuple[int, int, str, int | None, int, int]] = []
    for s in range(3):
        t = 100 * s
        rows += [(0, s, "1", None, t + 10, t + 20), (0, s, "2", None, t + 30, t + 40)]
        rows += [(1, s, "1", None, t + 15, t + 20), (2, s, "2", None, t + 25, t + 40)]
    coll = _grouped(rows)
    truth = {((0, 100 * s + 10), (1, 100 * s + 15)) for s in range(3)} | {((0, 100 * s + 30), (2, 100 * s + 25)) for s in range(3)}
    assert _pairs(coll) == truth
    m = model_job(coll, pl.DataFrame(), ranks=[0, 1, 2])
    assert (m.matched_collectives, m.unmatched_kernels) == (6, 0)
    assert m.matching == MATCHING["group_order"]
    # the same kernels without their groups (an Nsight capture): order per operation, and the
    # wrong pairs it makes are visible as unmatched kernels
    blind = coll.with_columns(pl.lit("").alias("group"))
    assert _pairs(blind) != truth
    m = model_job(blind, pl.DataFrame(), ranks=[0, 1, 2])
    assert m.matching == MATCHING["order"]
    assert m.unmatched_kernels == 3


def test_recorded_sequence_numbers_survive_a_lost_collective() -> None:
    # two ranks, two all-reduces per step on group "0" (sequence 2s, 2s+1); rank 1's trace lost
    # the first one of step 1 (a profiler buffer overflow): by order, step 1 would pair rank 0's
    # first with rank 1's second
    rows: list[tuple[int, int, str, int | None, int, int]] = []
    for s in range(3):
        for i in range(2):
            start, end = 100 * s + 10 + 40 * i, 100 * s + 30 + 40 * i
            rows.append((0, s, "0", 2 * s + i, start, end))
            if (s, i) != (1, 0):
                rows.append((1, s, "0", 2 * s + i, start + 5, end))
    coll = _grouped(rows)
    pairs = _pairs(coll)
    assert len(pairs) == 5
    assert all(a[1] + 5 == b[1] for a, b in pairs), "every pair is one collective (rank 1 arrives 5 units later)"
    m = model_job(coll, pl.DataFrame(), ranks=[0, 1])
    assert m.matching == MATCHING["sequence"]
    assert (m.matched_collectives, m.unmatched_kernels) == (5, 1)
    by_order = _pairs(coll.with_columns(pl.lit(None, dtype=pl.Int64).alias("group_seq")))
    assert not all(a[1] + 5 == b[1] for a, b in by_order)
    # one rank without sequence numbers (another PyTorch version): the job falls back to order
    # within the group for everyone, never mixing the two bases
    mixed = coll.with_columns(pl.when(pl.col("rank") == 1).then(None).otherwise(pl.col("group_seq")).alias("group_seq"))
    assert set(match_collectives(mixed)["matched_by"].to_list()) == {"group_order"}


def test_hand_built_job_by_arithmetic() -> None:
    # two ranks, one all-reduce per step taking 2 units once both arrived; rank 1 works 10 units
    # between collectives, rank 0 works 6; rank 1's clock runs 1,000 units ahead
    rows = []
    end = 0
    for s in range(4):
        a0, a1 = end + 6, end + 10
        end = max(a0, a1) + 2
        rows += [(0, s, 0, a0, end), (1, s, 0, a1 + 1000, end + 1000)]
    gaps = pl.DataFrame(
        {"rank": [1, 1, 1], "start_ns": [1013, 1025, 1037], "end_ns": [1016, 1028, 1040], "data_loading_ns": [3, 3, 3]},
        schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64, "data_loading_ns": pl.Int64},
    )
    m = model_job(_coll(rows), gaps, ranks=[0, 1])
    assert m.step_ms == pytest.approx(12 / 1e6)
    assert m.clocks.filter(pl.col("rank") == 1)["clock_offset_ms"][0] - m.clocks.filter(pl.col("rank") == 0)["clock_offset_ms"][0] == pytest.approx(1000 / 1e6)
    waits = {r["rank"]: r for r in m.waits.iter_rows(named=True)}
    assert waits[0]["wait_ms_per_step"] == pytest.approx(4 / 1e6)
    assert waits[0]["waits_for"] == 1
    # rank 1's 3 units of loading removed: it arrives after 7, rank 0 after 6 -> step 9
    fix = m.what_if("data_loading@rank1")
    assert fix is not None
    assert fix.predicted_step_ms == pytest.approx(9 / 1e6)
    # rank 1 at the median of (6, 10) = 8 -> step 10
    med = m.what_if("straggler_at_median")
    assert med is not None
    assert med.rank == 1
    assert med.predicted_step_ms == pytest.approx(10 / 1e6)
    overlap = m.what_if("perfect_overlap")
    assert overlap is not None
    assert overlap.predicted_step_ms == pytest.approx(10 / 1e6)
    assert _path(m)[(1, "data_loading")] == pytest.approx(3 / 1e6)
    assert _path(m)[(1, "compute")] == pytest.approx(7 / 1e6)


def test_rank_lanes_show_the_planted_straggler(tmp_path: Path) -> None:
    # the synthetic pair (tests/synth): rank 1's backward runs 5 ms longer, so rank 0 waits 5 ms
    # inside every all-reduce; the lanes put the path through rank 1's work and the wait on rank 0
    from tracekit.report.svg import lanes_step, rank_lanes_svg

    folder = _folder(tmp_path, [SAMPLE_TRACES / "synthetic" / f"multi_rank.rank{r}.kineto.json" for r in (0, 1)])
    jd = diagnose_job(read_job(folder, cache=False))
    assert jd.model is not None
    assert jd.model.lanes is not None
    lanes = jd.model.lanes
    step = lanes_step(lanes)
    assert step is not None
    rows = lanes.filter(pl.col("step") == step)
    assert rows.filter(pl.col("critical"))["rank"].unique().to_list() == [1]
    # one collective ends at one instant on both ranks once the clocks are aligned
    assert rows.group_by("j").agg((pl.col("end_ns").max() - pl.col("end_ns").min()).alias("d"))["d"].max() <= 1_000
    page = rank_lanes_svg(lanes, step)
    assert "rank 0: waits 5.00 ms in allreduce for the last rank" in page
    assert "rank 1: waits" not in page
    assert "on the cross-rank critical path" in page


def test_uncoupled_ranks_say_so() -> None:
    m = model_job(pl.DataFrame(schema=COLLECTIVES_SCHEMA), pl.DataFrame(), ranks=[0, 1], world_size=4)
    assert m.step_ms is None
    assert m.what_ifs == ()
    assert m.missing_ranks == (2, 3)
    assert any("records communication" in n for n in m.notes)


# --------------------------------------------------------------------------- real multi-rank folders


def _folder(tmp_path: Path, files: list[Path]) -> Path:
    for f in files:
        shutil.copy(f, tmp_path / f.name)
    return tmp_path


def _real_folders(tmp_path: Path) -> dict[str, Callable[[], Path]]:
    synth = SAMPLE_TRACES / "synthetic"
    return {
        "ddp_gloo": lambda: SAMPLE_TRACES / "captures" / "ddp_gloo",
        "multi_rank_kineto": lambda: _folder(tmp_path / "k", [synth / f"multi_rank.rank{r}.kineto.json" for r in (0, 1)]),
        "multi_rank_nsys": lambda: _folder(tmp_path / "n", [synth / f"multi_rank.rank{r}.nsys.sqlite" for r in (0, 1)]),
        "trace_filter": lambda: shared_trace("hta/tests/data/trace_filter"),
        "nccl_parser_config": lambda: shared_trace("hta/tests/data/nccl_parser_config"),
        "nsys_two_processes": lambda: _folder(tmp_path / "s", [shared_trace("nsight/nsys-ai/h100_2gpu_1s.sqlite")]),
    }


#: how each folder's collectives must be matched (what its traces record)
_MATCHING = {
    "ddp_gloo": MATCHING["order"],  # gloo: host ranges, no process-group args
    "multi_rank_kineto": MATCHING["group_order"],  # record_param_comms args without a sequence number
    "multi_rank_nsys": MATCHING["order"],  # NCCL kernel names carry no group
    "trace_filter": MATCHING["order"],  # 2022 vintage: no process-group args
    "nsys_two_processes": None,  # no communication kernels in the 1 s slice
}


@pytest.mark.parametrize(
    "name",
    [
        "ddp_gloo",
        "multi_rank_kineto",
        "multi_rank_nsys",
        pytest.param("trace_filter", marks=pytest.mark.shared),
        pytest.param("nccl_parser_config", marks=pytest.mark.shared),
        pytest.param("nsys_two_processes", marks=pytest.mark.shared),
    ],
)
def test_analyze_real_multi_rank_folders(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "k").mkdir()
    (tmp_path / "n").mkdir()
    (tmp_path / "s").mkdir()
    folder = _real_folders(tmp_path)[name]()
    assert main(["analyze", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "Job as one system" in text
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    model = json.loads(capsys.readouterr().out)["job"]["model"]
    assert model is not None
    if name == "nccl_parser_config":  # one rank of two: nothing to join, and it says so
        assert model["missing_ranks"] == [1]
        return
    assert model["matching"] == _MATCHING[name]
    if model["matching"] is None:
        assert model["notes"]
        return
    assert f"clocks aligned on the ends of {model['matched_collectives']} collectives (matched by {model['matching']})" in text
    assert model["critical_path"]
    assert model["waits"]
    assert model["clock_residual_us"] is not None
    assert main(["analyze", str(folder), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert "Rank lanes of step" in page
    assert page.count('aria-label="rank lanes of step') == 1
    if name.startswith("multi_rank"):
        # the synthetic pair plants rank 1 as the slow one
        assert model["bottleneck"]["rank"] == 1
    if name == "trace_filter":
        assert model["missing_ranks"][:3] == [2, 3, 4]
        assert any("do not end together" in n for n in model["notes"])


def test_batch_predicts_the_job_step_without_the_straggler(tmp_path: Path) -> None:
    from tracekit.batch import run_batch

    spec = JOBS["slow_gpu"]
    write_job(simulate_job(spec), tmp_path / "traces" / "job")
    run_batch([str(tmp_path / "traces")], tmp_path / "out", workers=1)
    jobs = pl.read_parquet(tmp_path / "out" / "jobs.parquet")
    assert jobs.height == 1
    row = jobs.row(0, named=True)
    truth_ms = simulate_job(straggler_at_median(spec, 1, 0)).steady_step_ns / 1e6
    assert row["critical_rank"] == 1
    assert row["straggler_fixed_step_ms"] == pytest.approx(truth_ms, rel=0.02)
    assert row["job_step_ms"] == pytest.approx(simulate_job(spec).steady_step_ns / 1e6, rel=0.01)


def test_batch_says_why_a_side_stream_job_has_no_prediction(tmp_path: Path) -> None:
    from tracekit.batch import run_batch

    write_job(simulate_job(JOBS["slow_loader_overlapped"]), tmp_path / "traces" / "overlapped")
    write_job(simulate_job(JOBS["slow_gpu"]), tmp_path / "traces" / "blocking")
    run_batch([str(tmp_path / "traces")], tmp_path / "out", workers=1)
    jobs = {r["job"]: r for r in pl.read_parquet(tmp_path / "out" / "jobs.parquet").iter_rows(named=True)}
    assert len(jobs) == 2
    side = next(r for name, r in jobs.items() if "overlapped" in name)
    blocking = next(r for name, r in jobs.items() if "blocking" in name)
    # the simulator names process group "0" without sequence numbers
    assert side["collective_matching"] == blocking["collective_matching"] == MATCHING["group_order"]
    assert blocking["job_model_note"] is None
    assert blocking["straggler_fixed_step_ms"] is not None
    # side-stream collectives need the launch links batch does not keep: withheld, and said so
    assert side["straggler_fixed_step_ms"] is None
    assert "overlaps compute" in side["job_model_note"]
    assert "withheld" in side["job_model_note"]
    collectives = pl.read_parquet(tmp_path / "out" / "collectives.parquet")
    assert set(collectives["group"].to_list()) == {"0"}


def test_job_findings_carry_the_predicted_job_step(cases: dict[str, Case]) -> None:
    for name, c in cases.items():
        found = c.jd.multirank.findings
        priced = [f for f in found if f.predicted_step_ms is not None]
        assert priced, name
        savings = [(c.model.step_ms or 0) - (f.predicted_step_ms or 0) for f in priced]
        assert savings == sorted(savings, reverse=True), name
        assert found[: len(priced)] == tuple(priced), name
    straggler = next(f for f in cases["slow_gpu"].jd.multirank.findings if f.kind == "straggler")
    w = cases["slow_gpu"].model.what_if("straggler_at_median")
    assert w is not None
    assert straggler.predicted_step_ms == w.predicted_step_ms


def test_overlapped_communication_is_modelled_on_a_side_stream(cases: dict[str, Case]) -> None:
    # DDP's default: all-reduces on a side stream alongside the backward pass; the slow loader
    # of rank 3 still holds every rank back, through the collectives of the next step
    m = cases["slow_loader_overlapped"].model
    assert not any("overlaps compute" in n for n in m.notes)
    path = _path(m)
    loading = {rank: ms for (rank, cause), ms in path.items() if cause == "data_loading"}
    assert set(loading) == {3}
    fix = m.what_if("data_loading@rank3")
    assert fix is not None
    assert fix.saving_ms > 5.0


def test_overlap_without_launch_links_withholds_the_what_ifs() -> None:
    # without the launches (no ready times) a side-stream job cannot be chained: no answers
    rows = [(r, s, 0, 100 * s + 10 + r, 100 * s + 20) for s in range(4) for r in (0, 1)]
    m = model_job(_coll(rows), pl.DataFrame(), ranks=[0, 1], overlapped_share=0.6)
    assert m.what_ifs == ()
    assert any("overlaps compute" in n for n in m.notes)
