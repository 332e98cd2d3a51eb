"""Multi-rank analysis: stragglers, imbalance and exposed communication with exact synthetic truth
(both formats), clock skew, job grouping and rank assignment, real two-rank traces, and
`tracekit analyze FOLDER`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import SAMPLE_TRACES, shared_trace

import tracekit
from tracekit.analysis import diagnose, diagnose_job
from tracekit.analysis.multirank import analyze_ranks, collective_op, rank_profiles
from tracekit.cli import main
from tracekit.errors import UsageError
from tracekit.reading.job import (
    CaptureMetadata,
    FileMeta,
    assign_ranks,
    group_jobs,
    name_template,
    rank_from_name,
    read_job,
    split_ranks,
)
from tracekit.schema import TraceTables

SYNTH = SAMPLE_TRACES / "synthetic"


def _truth() -> dict[str, Any]:
    return json.loads((SYNTH / "multi_rank.rank0.expected.json").read_text())["headline"]


def _profiles(tables: TraceTables, rank: int | None = None) -> list[Any]:
    if rank is not None:
        tables = TraceTables(info=tables.info, events=tables.events.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank")),
                             links=tables.links, devices=tables.devices, threads=tables.threads)
    return rank_profiles(tables.events, diagnose(tables), tables.info.path)


@pytest.mark.parametrize("fmt", ["kineto.json", "nsys.sqlite"])
def test_synthetic_straggler_imbalance_and_exposed_communication(fmt: str) -> None:
    truth = _truth()
    job = read_job([SYNTH / f"multi_rank.rank0.{fmt}", SYNTH / f"multi_rank.rank1.{fmt}"], cache=False)
    assert job.rank_numbers == (0, 1)
    m = diagnose_job(job).multirank
    assert m.stragglers == (truth["straggler_rank"],)
    assert m.straggler_basis == "collective_start"
    assert m.aligned_steps == tuple(range(1, 9))
    assert m.matched_collectives == 8
    assert m.straggle_ms_per_step == pytest.approx(truth["straggle_ns_per_step"] / 1e6, abs=1e-6)
    rows = {r["rank"]: r for r in m.per_rank.iter_rows(named=True)}
    for rank in (0, 1):
        by = truth["by_rank"][str(rank)]
        assert rows[rank]["communication_ms"] == pytest.approx(by["allreduce_ns_per_step"] / 1e6, abs=1e-6)
        assert rows[rank]["exposed_communication_ms"] == pytest.approx(by["allreduce_ns_per_step"] / 1e6, abs=1e-6)
        assert rows[rank]["wait_ms"] == pytest.approx(by["allreduce_wait_ns_per_step"] / 1e6, abs=1e-6)
        assert rows[rank]["clock_offset_ms"] == pytest.approx(0.0, abs=1e-6)
    # the late rank arrives 5 ms after rank 0 at every all-reduce; compute differs by its longer backward
    assert rows[1]["late_ms"] == pytest.approx(5.0, abs=1e-6)
    assert rows[0]["late_ms"] == 0.0
    assert rows[1]["compute_ms"] - rows[0]["compute_ms"] == pytest.approx(5.0, abs=1e-3)
    mean = (rows[0]["compute_ms"] + rows[1]["compute_ms"]) / 2
    assert m.imbalance == pytest.approx(rows[1]["compute_ms"] / mean - 1, rel=1e-9)
    assert m.compute_spread_ms == pytest.approx(5.0, abs=1e-3)
    assert m.wait_ms == pytest.approx(2.5, abs=1e-6)
    # costs: the straggler (5 ms = 7.4% of the step) is a finding; the imbalance and the
    # transfer that is exposed beyond the waiting (2.5 and 3 ms) are below 5%
    assert [f.kind for f in m.findings] == ["straggler"]
    assert m.findings[0].evidence["straggler_ranks"] == [1]
    per_step = m.per_step.filter(pl.col("rank") == 0)
    assert per_step["wait_ns"].to_list() == [5_000_000] * 8


def test_clock_skew_is_removed_using_collective_ends() -> None:
    t0 = tracekit.read_trace(SYNTH / "multi_rank.rank0.kineto.json", cache=False)
    t1 = tracekit.read_trace(SYNTH / "multi_rank.rank1.kineto.json", cache=False)
    skew = 40_000_000  # rank 1's host clock runs 40 ms ahead
    shifted = t1.events.with_columns(pl.col("start_ns") + skew, pl.col("end_ns") + skew)
    t1s = TraceTables(info=t1.info, events=shifted, links=t1.links, devices=t1.devices, threads=t1.threads)
    m = analyze_ranks([*_profiles(t0), *_profiles(t1s)])
    offsets = dict(m.per_rank.select("rank", "clock_offset_ms").rows())
    assert offsets[1] - offsets[0] == pytest.approx(40.0, abs=1e-6)
    assert m.stragglers == (1,)
    assert m.straggle_ms_per_step == pytest.approx(5.0, abs=1e-6)


def test_identical_ranks_have_no_straggler_and_no_imbalance() -> None:
    t0 = tracekit.read_trace(SYNTH / "multi_rank.rank0.kineto.json", cache=False)
    m = analyze_ranks([*_profiles(t0, 0), *_profiles(t0, 1)])
    assert m.ranks == (0, 1)
    assert m.stragglers == ()
    assert m.imbalance == pytest.approx(0.0, abs=1e-12)
    assert m.wait_ms == 0.0
    assert [f.kind for f in m.findings] == ["exposed_communication"]  # 8 ms all-reduce, nothing overlaps it
    assert m.findings[0].ms_per_step == pytest.approx(8.0, abs=1e-6)


def test_single_rank_job_compares_nothing() -> None:
    m = analyze_ranks(_profiles(tracekit.read_trace(SYNTH / "healthy.kineto.json", cache=False)))
    assert m.ranks == (0,)
    assert m.stragglers == ()
    assert m.imbalance is None
    assert m.findings == ()
    assert m.per_rank.height == 1
    assert m.per_rank["steps"][0] == 8


def test_collective_operations_from_kernel_names() -> None:
    names = [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", None, "allreduce"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", None, "allreduce"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", None, "sendrecv"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", None, "reducescatter"),
        ("ncclDevKernel_AllGather_RING_LL", "_allgather_base", "allgather"),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)", None, "allreduce"),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", None, "broadcast"),
        ("ncclDevKernel_AllToAll", None, "alltoall"),
        ("some_custom_kernel", None, "other"),
    ]
    frame = pl.DataFrame({"name": [n for n, _, _ in names], "collective": [c for _, c, _ in names]})
    got = frame.select(collective_op(pl.col("name"), pl.col("collective")))["literal"].to_list()
    assert got == [op for _, _, op in names]


# --------------------------------------------------------------------------- grouping


def test_rank_numbers_and_templates_from_file_names() -> None:
    assert rank_from_name("sampled_rank-1.json.gz") == 1
    assert rank_from_name("multi_rank.rank1.kineto.json") == 1
    assert rank_from_name("rank12.cycle0.pt.trace.json.gz") == 12
    assert rank_from_name("host_123.1700000.pt.trace.json") is None
    assert name_template("rank_3.json") == "rank_*.json"
    assert name_template("trace.json") is None


def _meta(path: str, rank: int = 0, *, trusted: bool = False, ws: int | None = None, fmt: str = "kineto",
          start: int | None = None, end: int | None = None) -> FileMeta:
    return FileMeta(path=path, format=fmt, ranks=(rank,), trusted=trusted, world_size=ws, start_ns=start, end_ns=end)


def test_group_jobs_by_template_world_size_time_and_capture() -> None:
    files = [
        _meta("/a/sampled_rank-0.json.gz", 0, trusted=True, ws=128),
        _meta("/a/sampled_rank-1.json.gz", 1, trusted=True, ws=128),
        _meta("/a/healthy.json"),
        _meta("/a/m.rank0.nsys.sqlite", fmt="nsys"),
        _meta("/a/m.rank1.nsys.sqlite", fmt="nsys"),
        # two captures of one 2-rank job in one folder, named by host and pid: split by time
        _meta("/b/h_1.1.pt.trace.json", 0, trusted=True, ws=2, start=0, end=100),
        _meta("/b/h_2.1.pt.trace.json", 1, trusted=True, ws=2, start=5, end=101),
        _meta("/b/h_1.2.pt.trace.json", 0, trusted=True, ws=2, start=500, end=600),
        _meta("/b/h_2.2.pt.trace.json", 1, trusted=True, ws=2, start=502, end=603),
        # a capture folder: metadata decides, even against file order
        _meta("/c/x.nsys.sqlite", fmt="nsys"),
        _meta("/c/y.nsys.sqlite", fmt="nsys"),
    ]
    capture = CaptureMetadata(folder="/c", world_size=2, traces=frozenset({"x.nsys.sqlite", "y.nsys.sqlite"}),
                              rank_of_trace={"x.nsys.sqlite": 1, "y.nsys.sqlite": 0}, rank_of_pid={}, raw={})
    plans = {p.name: p for p in group_jobs(files, {"/c": capture}, relative_to="/")}
    assert set(plans) == {"a/sampled_rank-*.json.gz", "a/healthy.json", "a/m.rank*.nsys.sqlite", "b/*.kineto", "b/*.kineto#2", "c"}
    assert dict(plans["a/sampled_rank-*.json.gz"].members) == {"/a/sampled_rank-0.json.gz": {0: 0}, "/a/sampled_rank-1.json.gz": {1: 1}}
    assert plans["a/sampled_rank-*.json.gz"].world_size == 128
    assert plans["a/m.rank*.nsys.sqlite"].rank_sources["/a/m.rank1.nsys.sqlite"] == "file_name"
    assert sorted(plans["b/*.kineto"].members) == ["/b/h_1.1.pt.trace.json", "/b/h_2.1.pt.trace.json"]
    assert sorted(plans["b/*.kineto#2"].members) == ["/b/h_1.2.pt.trace.json", "/b/h_2.2.pt.trace.json"]
    assert plans["c"].members["/c/x.nsys.sqlite"] == {0: 1}
    assert plans["c"].rank_sources["/c/y.nsys.sqlite"] == "capture_metadata"
    assert plans["a/healthy.json"].rank_sources["/a/healthy.json"] == "single"


def test_assign_ranks_by_pid_and_on_collisions() -> None:
    multi = FileMeta(path="/c/job.nsys.sqlite", format="nsys", ranks=(0, 1), rank_pids={0: 100, 1: 200})
    capture = CaptureMetadata(folder="/c", world_size=2, traces=frozenset({"job.nsys.sqlite"}), rank_of_trace={},
                              rank_of_pid={100: 1, 200: 0}, raw={})
    members, sources, _ = assign_ranks([multi], capture)
    assert members["/c/job.nsys.sqlite"] == {0: 1, 1: 0}
    assert sources["/c/job.nsys.sqlite"] == "capture_metadata"
    # two files claiming rank 0: the second is numbered by file order, and a note says so
    members, sources, notes = assign_ranks([_meta("/d/a.json", 0, trusted=True), _meta("/d/b.json", 0, trusted=True)])
    assert members == {"/d/a.json": {0: 0}, "/d/b.json": {0: 1}}
    assert sources["/d/b.json"] == "file_order"
    assert notes


def test_read_job_capture_folder_uses_metadata(tmp_path: Path) -> None:
    # the metadata maps the files against their name order: it must win over file order
    shutil.copy(SYNTH / "multi_rank.rank1.nsys.sqlite", tmp_path / "a.nsys.sqlite")
    shutil.copy(SYNTH / "multi_rank.rank0.nsys.sqlite", tmp_path / "b.nsys.sqlite")
    (tmp_path / "metadata.json").write_text(json.dumps({
        "world_size": 2, "command": ["python", "train.py"],
        "ranks": [{"rank": 0, "pid": 11, "trace": "b.nsys.sqlite"}, {"rank": 1, "pid": 12, "trace": "a.nsys.sqlite"}],
    }))
    (tmp_path / "notes.json").write_text("{}")  # not a trace: skipped because the metadata does not list it
    job = read_job(tmp_path, cache=False)
    assert [(r.rank, Path(r.path).name, r.rank_source) for r in job.ranks] == [
        (0, "b.nsys.sqlite", "capture_metadata"), (1, "a.nsys.sqlite", "capture_metadata")]
    assert job.world_size == 2
    assert job.metadata["command"] == ["python", "train.py"]
    assert diagnose_job(job).multirank.stragglers == (1,)


def test_read_job_refuses_a_folder_of_several_jobs() -> None:
    with pytest.raises(UsageError, match="different jobs"):
        read_job(SYNTH, cache=False)


# --------------------------------------------------------------------------- real traces


def test_real_two_rank_job_aligns_steps_and_matches_collectives() -> None:
    folder = shared_trace("hta/tests/data/trace_filter")
    job = read_job(folder, cache=False)
    assert job.rank_numbers == (0, 1)
    assert job.world_size == 128
    assert {r.rank_source for r in job.ranks} == {"distributed_info"}
    m = diagnose_job(job).multirank
    assert m.aligned_steps == (551, 552)
    assert m.matched_collectives == 10
    assert m.stragglers == (1,)
    assert any("2 of 128 ranks" in n for n in m.notes)
    # a collective cannot make a rank wait longer than the kernel ran
    per_step = m.per_step
    assert (per_step["wait_ns"] >= 0).all()
    assert (per_step["late_ns"] >= 0).all()


def test_nsight_file_of_two_processes_is_split_into_ranks() -> None:
    path = shared_trace("nsight/nsys-ai/h100_2gpu_1s.sqlite")
    tables = tracekit.read_trace(path, cache=False)
    parts = split_ranks(tables)
    assert sorted(parts) == [0, 1]
    ids = [set(p.events["event_id"].to_list()) for p in parts.values()]
    assert not ids[0] & ids[1]
    assert sum(len(i) for i in ids) == tables.events.height
    for r, p in parts.items():
        assert p.info.ranks == (r,)
        assert p.events["rank"].unique().to_list() == [r]
        assert p.links["gpu_event_id"].is_in(p.events["event_id"].implode()).all()
    job = read_job(path, cache=False)
    assert job.rank_numbers == (0, 1)
    assert {r.rank_source for r in job.ranks} == {"process_order"}
    m = diagnose_job(job).multirank
    assert m.straggler_basis == "step_start"
    assert m.stragglers == ()


# --------------------------------------------------------------------------- analyze FOLDER


def test_analyze_folder_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for r in (0, 1):
        shutil.copy(SYNTH / f"multi_rank.rank{r}.kineto.json", tmp_path / f"rank{r}.pt.trace.json")
    assert main(["analyze", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "stragglers: rank 1" in text
    assert "── rank 0" in text
    assert "── rank 1" in text
    assert main(["analyze", str(tmp_path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    single = json.loads(json.dumps(_single_report_keys()))
    assert set(single) <= set(data)  # the single-trace contract is kept
    assert data["trace"]["rank"] == 0
    assert data["job"]["stragglers"] == [1]
    assert data["job"]["ranks"] == [0, 1]
    assert [r["rank"] for r in data["job"]["per_rank"]] == [0, 1]
    assert data["job"]["findings"][0]["kind"] == "straggler"
    assert [r["trace"]["rank"] for r in data["ranks"]] == [0, 1]
    assert main(["analyze", str(tmp_path), "--format", "markdown"]) == 0
    assert "(straggler)" in capsys.readouterr().out
    assert main(["analyze", str(tmp_path), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    assert "tracekit diagnosis: job" in page
    assert "Straggler rank(s)" in page
    assert "Rank 0 · " in page
    assert "Rank 1 · " in page


def _single_report_keys() -> list[str]:
    from tracekit.report import to_json_dict

    return list(to_json_dict(diagnose(tracekit.read_trace(SYNTH / "healthy.kineto.json", cache=False))))
