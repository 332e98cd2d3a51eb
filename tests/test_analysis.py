"""Analyses: interval algebra on tiny frames (with property tests), exact attribution on the
synthetic scenarios (both formats), and robustness on every real trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import SAMPLE_TRACES, SHARED_TRACES, shared_trace, shared_trace_params
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit
from tracekit.analysis import CAUSES, Diagnosis, diagnose
from tracekit.analysis.intervals import complement, covered_in, union
from tracekit.analysis.steps import find_steps
from tracekit.report import render_text, to_json_dict

SYNTH = SAMPLE_TRACES / "synthetic"


def _truth(name: str) -> dict[str, Any]:
    return json.loads((SYNTH / f"{name}.expected.json").read_text())


def _diagnose(name: str, fmt: str) -> Any:
    return diagnose(tracekit.read_trace(SYNTH / f"{name}.{fmt}", cache=False))


# --------------------------------------------------------------------------- intervals


def test_union_merges_overlapping_and_touching() -> None:
    iv = pl.DataFrame({"d": [0, 0, 0, 0, 1], "start_ns": [0, 5, 12, 30, 0], "end_ns": [10, 12, 25, 30, 100]})
    u = union(iv, ["d"])
    assert u.rows() == [(0, 0, 25), (1, 0, 100)]


keyed_intervals = st.lists(
    st.tuples(st.sampled_from([None, 1, 2]), st.sampled_from([None, 7, 8]), st.integers(-5, 60), st.integers(-3, 25)),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(rows=keyed_intervals, nkeys=st.integers(0, 2))
def test_union_equals_a_plain_merge_per_group(rows: list[tuple[int | None, int | None, int, int]], nkeys: int) -> None:
    """Groups are told apart with nulls as a key value, in (by, start) order, one row per merged run."""
    by = ["a", "b"][:nkeys]
    frame = pl.DataFrame(
        [(a, b, s, s + d) for a, b, s, d in rows], schema={"a": pl.Int32, "b": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    )
    groups: dict[tuple[int | None, ...], list[tuple[int, int]]] = {}
    for a, b, s, d in rows:
        if d > 0:
            groups.setdefault((a, b)[:nkeys], []).append((s, s + d))
    expected = []
    # polars sorts nulls first
    for key in sorted(groups, key=lambda k: tuple((v is not None, v or 0) for v in k)):
        merged: list[list[int]] = []
        for s, e in sorted(groups[key]):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        expected += [(*key, s, e) for s, e in merged]
    assert union(frame, by).rows() == expected


def test_covered_and_complement() -> None:
    u = union(pl.DataFrame({"d": [0, 0], "start_ns": [0, 20], "end_ns": [12, 25]}), ["d"])
    w = pl.DataFrame({"d": [0, 0], "step": [1, 2], "start_ns": [0, 15], "end_ns": [15, 40]})
    assert covered_in(w, u, ["d"]).to_list() == [12, 5]
    gaps = complement(u, w, ["d"], ["d", "step"])
    assert gaps.rows() == [(0, 1, 12, 15), (0, 2, 15, 20), (0, 2, 25, 40)]


intervals = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(0, 200)).map(lambda t: (t[0], t[0] + t[1])), min_size=0, max_size=40
)
cuts = st.lists(st.integers(0, 1300), min_size=2, max_size=6, unique=True).map(sorted)


@settings(max_examples=200, deadline=None)
@given(ivs=intervals, bounds=cuts)
def test_busy_plus_gaps_equals_window_and_gaps_never_overlap_busy(ivs: list[tuple[int, int]], bounds: list[int]) -> None:
    frame = pl.DataFrame({"d": [0] * len(ivs), "start_ns": [a for a, _ in ivs], "end_ns": [b for _, b in ivs]},
                         schema={"d": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
    u = union(frame, ["d"])
    windows = pl.DataFrame({"d": [0] * (len(bounds) - 1), "step": list(range(len(bounds) - 1)),
                            "start_ns": bounds[:-1], "end_ns": bounds[1:]})
    busy = covered_in(windows, u, ["d"]).to_list()
    gaps = complement(u, windows, ["d"], ["d", "step"])
    covered = set()
    for a, b in ivs:
        covered.update(range(a, b))
    for (step, a, b), busy_ns in zip(windows.select("step", "start_ns", "end_ns").rows(), busy, strict=True):
        expected_busy = sum(1 for t in range(a, b) if t in covered)
        assert busy_ns == expected_busy
        g = gaps.filter(pl.col("step") == step)
        assert int(g.select((pl.col("end_ns") - pl.col("start_ns")).sum()).item() or 0) + busy_ns == b - a
        for _, _, ga, gb in g.rows():
            assert a <= ga < gb <= b
            assert not any(t in covered for t in range(ga, gb))


# --------------------------------------------------------------------------- synthetic scenarios

SCENARIOS = ["healthy", "dataloader_stall", "dataloader_fixed", "host_sync", "host_sync_fixed", "launch_bound", "pageable_memcpy"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_kineto_attribution_is_exact(name: str) -> None:
    truth = _truth(name)
    d = _diagnose(name, "kineto.json")
    per_step = d.timeline.per_step.sort("step")
    assert per_step["step"].to_list() == [s["step"] for s in truth["per_step"]]
    # the last window also covers the GPU work its step launched (the truth stops at the CPU
    # range's end); it must reach exactly the end of the last GPU activity
    last = per_step.tail(1).row(0, named=True)
    assert last["end_ns"] >= truth["per_step"][-1]["end_ns"]
    for ours, want in zip(per_step.head(-1).iter_rows(named=True), truth["per_step"][:-1], strict=True):
        assert ours["dur_ns"] == want["duration_ns"]
        assert ours["busy_ns"] == want["gpu_busy_ns"]
        expected = dict(want["idle_by_cause"])
        if "pageable_memcpy" in want["compute_idle_by_cause"]:
            # our pageable bucket also holds the busy copy time (no kernel runs during it)
            expected["pageable_memcpy"] = want["compute_idle_by_cause"]["pageable_memcpy"]
        got = {c: ours[f"{c}_ns"] for c in CAUSES if c != "compute" and ours[f"{c}_ns"]}
        assert got == expected, f"step {ours['step']}"


@pytest.mark.parametrize("name", SCENARIOS)
def test_nsight_attribution_matches_kineto(name: str) -> None:
    """Same scenario, other format: identical windows and busy time; the same causes, except
    that Nsight has no operator ranges (aten::to...), so the few µs of op lead-in and tail
    around launches stay unattributed instead of taking the operator's cause."""
    kin = _diagnose(name, "kineto.json").timeline.per_step.sort("step")
    nsy = _diagnose(name, "nsys.sqlite").timeline.per_step.sort("step")
    assert nsy.select("dur_ns", "busy_ns", "compute_ns").equals(kin.select("dur_ns", "busy_ns", "compute_ns"))
    moved = pl.Series([0] * kin.height)
    for cause in CAUSES:
        if cause in ("compute", "unattributed"):
            continue
        delta = kin[f"{cause}_ns"] - nsy[f"{cause}_ns"]
        assert (delta >= 0).all(), cause
        assert (delta < 10_000).all(), cause
        moved = moved + delta
    assert (nsy["unattributed_ns"] - kin["unattributed_ns"]).to_list() == moved.to_list()


@pytest.mark.parametrize("fmt", ["kineto.json", "nsys.sqlite"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_analyze_names_the_planted_cause_first(name: str, fmt: str) -> None:
    truth = _truth(name)
    d = _diagnose(name, fmt)
    kinds = [f.kind for f in d.findings]
    if truth["expected_top_cause"] is None or name.endswith("_fixed"):
        assert kinds == [], kinds
    elif name == "pageable_memcpy":
        # the copy precedes the step's kernels on their stream and the step ends in a sync:
        # pinning can only make the copy itself faster (pinned bandwidth instead of the recorded
        # one), under 5% of the step, so the replay does not report it
        assert d.breakdown_ms["pageable_memcpy"] > 0
        assert "pageable_memcpy" not in kinds
    else:
        assert kinds[0] == truth["expected_top_cause"]
    # the last window reaches the end of its GPU work (not the CPU range), hence the tolerance
    assert d.gpu_utilization == pytest.approx(truth["totals"]["gpu_busy_fraction"], abs=5e-3)


def test_fixed_runs_are_faster_and_lose_the_finding() -> None:
    before, after = _diagnose("dataloader_stall", "kineto.json"), _diagnose("dataloader_fixed", "kineto.json")
    assert before.findings[0].ms_per_step == pytest.approx(40.0)
    assert after.step_ms_median is not None
    assert before.step_ms_median is not None
    assert after.step_ms_median == pytest.approx(before.step_ms_median - 38.0)


def test_sync_points_name_the_operator() -> None:
    d = _diagnose("host_sync", "kineto.json")
    stream = d.syncs.filter(pl.col("sync_kind") == "stream_sync")
    assert stream.height == 8
    assert set(stream["op"].to_list()) == {"aten::item"}
    assert stream["explicit"].all()
    assert set(stream["step"].to_list()) == set(range(1, 9))
    finding = d.findings[0]
    assert finding.kind == "host_device_sync"
    # what removing the sync saves: the same loop recorded without it (host_sync_fixed)
    fixed = _diagnose("host_sync_fixed", "kineto.json").step_ms_median
    assert d.step_ms_median is not None
    assert fixed is not None
    assert finding.ms_per_step == pytest.approx(d.step_ms_median - fixed, abs=0.02)
    assert finding.evidence["sync_calls"][0]["api"] == "cudaStreamSynchronize"


def test_launch_bound_evidence() -> None:
    d = _diagnose("launch_bound", "kineto.json")
    f = d.findings[0]
    assert f.kind == "launch_bound"
    assert f.evidence["median_kernel_us"] == 2.0
    assert f.evidence["kernels_per_step"] == 400.0


def test_multi_rank_exposed_communication() -> None:
    for rank, allreduce_ms in ((0, 8.0), (1, 3.0)):
        d = diagnose(tracekit.read_trace(SYNTH / f"multi_rank.rank{rank}.kineto.json", cache=False))
        assert d.info.rank == rank
        assert d.info.world_size == 2
        assert d.breakdown_ms["exposed_communication"] == pytest.approx(allreduce_ms)


def test_json_contract() -> None:
    data = to_json_dict(_diagnose("dataloader_stall", "kineto.json"))
    s = data["summary"]
    assert s["step_ms_median"] == pytest.approx(100.013625)
    assert 0 <= s["gpu_utilization"] <= 1
    assert set(s["breakdown"]) == set(CAUSES)
    assert sum(s["breakdown"].values()) == pytest.approx(1.0, abs=1e-3)
    assert {"rank", "step", "start_ns", "dur_ns", "gpu_busy_ns"} <= set(data["steps"][0])
    f = data["findings"][0]
    assert {"kind", "share_of_step", "ms_per_step", "evidence", "fix", "predicted_step_ms"} <= set(f)
    # ranked by saving; savings within 1% of the step tie and keep the kinds' order
    shares = [round(x["ms_per_step"] / s["step_ms_median"], 2) for x in data["findings"]]
    assert shares == sorted(shares, reverse=True)
    json.dumps(data)


# --------------------------------------------------------------------------- steps


def test_steps_tile_time() -> None:
    t = tracekit.read_trace(SYNTH / "host_sync.kineto.json", cache=False)
    steps = find_steps(t.events, t.links).frame.sort("start_ns")
    assert (steps["end_ns"].head(-1) == steps["start_ns"].tail(-1)).all()


def test_optimizer_steps_when_no_profiler_steps() -> None:
    t = tracekit.read_trace(shared_trace("param/linear_kineto.json.gz"), cache=False)
    steps = find_steps(t.events, t.links)
    assert steps.sources == {0: "optimizer"}
    assert steps.frame.filter(pl.col("complete")).height == 39  # 40 optimizer steps bound 39 whole iterations


def test_dataloader_and_optimizer_steps_on_resnet() -> None:
    t = tracekit.read_trace(shared_trace("param/resnet_kineto.json.gz"), cache=False)
    d = diagnose(t)
    assert d.step_sources == {0: "optimizer"}
    # the breakdown still explains idle time by data loading (a few steps stall), but the
    # replay prices fixes on the median steady-state step, which the stalls do not move
    assert d.breakdown_ms["data_loading"] > 0
    assert all(f.predicted_step_ms is None or f.predicted_step_ms <= (d.step_ms_median or 0) for f in d.findings)


def test_cpu_only_trace_says_so() -> None:
    d = diagnose(tracekit.read_trace(shared_trace("hta/tests/data/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"), cache=False))
    assert d.gpu_utilization is None
    assert any("CPU-only" in n for n in d.data_quality)
    assert d.findings == ()


# --------------------------------------------------------------------------- real traces

REAL = sorted(
    [p for p in SHARED_TRACES.rglob("*.json*") if "execution_trace/benchmark_simple_add_et" not in str(p)]
    + list(SHARED_TRACES.rglob("*.sqlite"))
) if SHARED_TRACES.exists() else []


#: shared traces that record GEMM shapes on a GPU of the peak table (device names in their
#: deviceProperties): their MFU is a number
MFU_MEASURED = {
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/mi300/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tracelens/b200/eager_trace.json.gz",
    "tracelens/torch_compile_triton/trace.json.gz",
    "hta/tests/data/trace_diff/control/control.json.gz",
    "hta/tests/data/trace_diff/test/test.json.gz",
    "hta/tests/data/negative_queue_length_values_check/rank0.json.gz",
}
NO_SHAPES_LINE = "MFU n/a: no operator shapes in the trace (capture with record_shapes=True)"


def check_mfu_text(rel: str, events: pl.DataFrame, out: str) -> None:
    """The text report (what `tracekit analyze` prints) of the shared trace ``rel``: one MFU line, a
    number on a known GPU with the roofline summary and a GEMM row when shapes are recorded, the
    reason otherwise; a trace without shapes is told to record them."""
    import re

    has_shapes = events["input_dims"].is_not_null().any()
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("MFU ")]
    assert len(lines) == 1, lines
    line = lines[0]
    if not has_shapes:
        assert line == NO_SHAPES_LINE
        assert "How well the busy time is used" not in out
        return
    assert "record_shapes=True" not in line  # a trace with shapes is never told to record them
    if rel in MFU_MEASURED:
        assert re.match(r"MFU \d+\.\d+% of the (bf16|fp16|tf32|fp32|fp8) peak \([\d.]+ TFLOP/s, .+\)", line), line
        assert re.search(r"How well the busy time is used: roofline on .+ \(peak [\d.]+ TFLOP/s", out)
        assert re.search(r"^\s+gemm\s+[\d.,]+\s+[\d.,]+", out, flags=re.MULTILINE), "no GEMM row in the roofline summary"
    else:
        assert line.startswith("MFU n/a: ")
        assert len(line) > len("MFU n/a: ") + 10  # a reason, in words


#: the real traces whose whole analysis costs most (about 1,000 short steps, or the largest
#: files) run with -m slow; every other real trace runs by default
SLOW_ANALYSES = {
    "gpupuzzlers/streams/blocking/blocking_streams.json.gz",
    "gpupuzzlers/streams/non_blocking/non_blocking_streams.json.gz",
    "hta/tests/data/df_index_resolver/df_index_resolver.json.gz",
    "hta/tests/data/mtia_trace_single_rank/mtia_rank_0.json.gz",
}


@pytest.mark.parametrize("path", shared_trace_params(REAL, SLOW_ANALYSES))
def test_every_real_trace_analyses(path: Path) -> None:
    tables = tracekit.read_trace(path)
    d = diagnose(tables)
    check_mfu_text(str(path.relative_to(SHARED_TRACES)), tables.events, render_text(d))
    data = to_json_dict(d)
    json.dumps(data)
    assert d.steps.height >= 1
    if d.gpu_utilization is not None:
        assert 0.0 <= d.gpu_utilization <= 1.0
        per = d.timeline.per_step
        total = sum(per[f"{c}_ns"] for c in CAUSES)
        assert (total == per["dur_ns"]).all(), "causes must tile each step window exactly"
    for f in d.findings:
        assert f.ms_per_step > 0
        assert 0 < f.share_of_step <= 1.0 + 1e-9
    _check_one_statistic(d)


def _check_one_statistic(d: Diagnosis) -> None:
    """Every per-step number describes the stated (median) step: the breakdown and the critical
    path's breakdown add up to it, and no finding costs more or predicts a longer step."""
    step = d.step_ms_median
    if step is None:
        return
    if d.breakdown_ms:
        assert sum(d.breakdown_ms.values()) == pytest.approx(step, rel=1e-6)
    for f in d.findings:
        assert f.ms_per_step <= step * (1 + 1e-9), f.kind
        if f.predicted_step_ms is not None:
            assert f.predicted_step_ms <= step * (1 + 1e-9), f.kind
    if d.critical_path is not None and d.critical_path.steps.height:
        cp = d.critical_path.breakdown_per_step()
        if sum(cp.values()):
            assert sum(cp.values()) == pytest.approx(step, rel=1e-6)


def test_same_analysis_path_on_real_nsight_and_kineto() -> None:
    nsys = diagnose(tracekit.read_trace(shared_trace("nsight/pipit/perlmutter-cloverleaf-cuda.sqlite")))
    kineto = diagnose(tracekit.read_trace(shared_trace("hta/tests/data/trace_diff/control/control.json.gz")))
    for d in (nsys, kineto):
        assert d.complete_steps >= 2
        assert d.gpu_utilization is not None
        assert 0 < d.gpu_utilization < 1
        assert d.kernels.kernel_count > 0
    # cloverleaf synchronises after every kernel, copying from pageable memory: the breakdown
    # charges idle gaps to both; removing either (replayed) saves under 5% of its GPU-bound step,
    # so neither is a finding
    assert nsys.breakdown_ms["host_device_sync"] > 0
    assert nsys.breakdown_ms["pageable_memcpy"] > 0
    assert not {"host_device_sync", "pageable_memcpy"} & {f.kind for f in nsys.findings}
