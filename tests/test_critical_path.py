"""The critical path and its what-ifs.

* Exact predictions on synthetic traces (the shipped scenarios and three built here with the
  same generator), in both formats: every expected value is derived from the scenario's
  expected.json numbers and the recorded event timings, and each test says why.
* HTA's published behaviour on its own critical-path traces, and where tracekit differs on
  purpose (docs/critical-path.md).
* Properties: the graph is acyclic, every edge weight fits between its ends, the path never
  exceeds the step and tiles it when the driving thread is recorded (random traces and every
  shared trace).
* The command line: ``analyze --what-if``, ``annotate``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import networkx as nx
import polars as pl
import pytest
import synth
from conftest import SAMPLE_TRACES, SHARED_TRACES, shared_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import tracekit
from tracekit.analysis import diagnose
from tracekit.analysis.critical_path import build_graph, critical_path, critical_path_window
from tracekit.analysis.findings import Finding, rank_by_saving
from tracekit.analysis.steps import find_steps
from tracekit.analysis.whatif import WHAT_IF_CAUSES, WhatIf, WhatIfResult, parse_what_if
from tracekit.cli import main
from tracekit.errors import UsageError
from tracekit.schema import LINKS, TraceInfo, TraceTables, finalize_events

SYNTH = SAMPLE_TRACES / "synthetic"
MS = 1_000_000
FORMATS = ["kineto.json", "nsys.sqlite"]


def _truth(name: str) -> dict[str, Any]:
    return json.loads((SYNTH / f"{name}.expected.json").read_text())


def _analyze(path: Path, what_ifs: dict[str, dict[str, float]] | None = None) -> tuple[TraceTables, Any, dict[str, pl.DataFrame]]:
    """Tables, critical path, and per what-if label the per-step predictions."""
    t = tracekit.read_trace(path, cache=False)
    steps = find_steps(t.events, t.links).frame
    asked = {label: WhatIf.of(f) for label, f in (what_ifs or {}).items()}
    cp = critical_path(t.events, t.links, steps, what_ifs=list(asked.values()))
    by_label = {label: next(r.per_step for r in cp.what_ifs if r.what_if == wi) for label, wi in asked.items()}
    return t, cp, by_label


def _windows(cp: Any) -> list[dict[str, Any]]:
    return cp.steps.sort("step").to_dicts()  # type: ignore[no-any-return]


def _in(events: pl.DataFrame, w: dict[str, Any]) -> pl.DataFrame:
    return events.filter((pl.col("start_ns") >= w["start_ns"]) & (pl.col("start_ns") < w["end_ns"]))


def _predicted(per_step: pl.DataFrame, step: int) -> int:
    return int(per_step.filter(pl.col("step") == step)["predicted_step_ns"][0])


def _outermost(events: pl.DataFrame, inner: dict[str, Any], pattern: str) -> dict[str, Any]:
    """The outermost operator matching ``pattern`` around ``inner`` on its thread (``inner`` itself without one)."""
    around = events.filter(
        (pl.col("kind") == "cpu_op") & (pl.col("tid") == inner["tid"]) & (pl.col("start_ns") <= inner["start_ns"])
        & (pl.col("end_ns") >= inner["end_ns"]) & pl.col("name").str.contains(pattern)
    )
    return around.sort("dur_ns", descending=True).row(0, named=True) if around.height else inner


# --------------------------------------------------------------------------------------------
# the shipped scenarios: the path is the step, its causes are the truth


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["healthy", "dataloader_stall", "dataloader_fixed", "host_sync", "host_sync_fixed",
                                  "launch_bound", "pageable_memcpy", "multi_rank.rank0", "multi_rank.rank1"])
def test_path_tiles_every_synthetic_step(name: str, fmt: str) -> None:
    """Every instant of a synthetic step is explained: the path runs from the step's start to
    its end without a hole, so its length is the step's wall time."""
    _, cp, _ = _analyze(SYNTH / f"{name}.{fmt}")
    assert cp.steps.height >= 2
    assert (cp.steps["path_ns"] == cp.steps["wall_ns"]).all()
    assert (cp.steps["cycles_broken"] == 0).all()
    for w in _windows(cp):
        seg = cp.segments.filter(pl.col("step") == w["step"]).sort("seq")
        assert int(seg["dur_ns"].sum()) == w["wall_ns"]
        assert seg["start_ns"][0] == w["start_ns"]
        assert (seg["start_ns"].tail(-1) == seg["end_ns"].head(-1)).all(), "consecutive stretches must touch"
        assert set(seg["track"].cast(pl.String).str.slice(0, 3).to_list()) <= {"cpu", "gpu"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_dataloader_stall_breakdown_and_what_ifs(fmt: str) -> None:
    """The DataLoader runs while the GPU is idle (its first kernel is launched after the
    load), so removing it moves every later event 40 ms earlier: exactly the step minus the
    expected 40 ms.  After the load the host only launches and waits in .item(), so the 60 ms
    of back-to-back kernels decide the rest: halving them saves exactly 30 ms."""
    truth = _truth("dataloader_stall")["headline"]
    _, cp, pred = _analyze(SYNTH / f"dataloader_stall.{fmt}", {"dl": {"data_loading": 0}, "k": {"kernels": 0.5}})
    ms = cp.breakdown_per_step()
    assert ms["data_loading"] == pytest.approx(truth["data_loading_idle_ns_per_step"] / 1e6, abs=1e-9)
    assert ms["gpu_compute"] == pytest.approx(truth["kernel_ns_per_step"] / 1e6, abs=1e-9)
    for w in _windows(cp):
        assert _predicted(pred["dl"], w["step"]) == w["wall_ns"] - truth["data_loading_idle_ns_per_step"]
        assert _predicted(pred["k"], w["step"]) == w["wall_ns"] - truth["kernel_ns_per_step"] // 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_host_sync_what_ifs(fmt: str) -> None:
    """Without the sync the host no longer waits for the GPU: the step becomes the longer of
    the GPU's work (to the end of the .item() copy) and the host's work without the sync
    (the .item() operator in Kineto, only the cudaStreamSynchronize call in Nsight, which
    records no operators)."""
    t, cp, pred = _analyze(SYNTH / f"host_sync.{fmt}", {"sync": {"host_device_sync": 0}, "cpu": {"cpu_bound": 0}})
    ev = t.events
    for w in _windows(cp):
        inside = _in(ev, w)
        copy = inside.filter(pl.col("kind") == "memcpy").row(0, named=True)
        call = inside.filter(pl.col("name") == "cudaStreamSynchronize").row(0, named=True)
        host_sync = _outermost(ev, call, r"^aten::(item|_local_scalar_dense)$")
        gpu_path = copy["end_ns"] - w["start_ns"]
        cpu_path = w["wall_ns"] - host_sync["dur_ns"]
        assert _predicted(pred["sync"], w["step"]) == max(gpu_path, cpu_path) == gpu_path
        if fmt == "kineto.json":
            # the 15 ms of logging after the sync is host work: without it the host waits
            # for the GPU instead, and the step is the GPU's 60 ms plus the sync's tail
            assert _predicted(pred["cpu"], w["step"]) == w["wall_ns"] - 15 * MS


@pytest.mark.parametrize("fmt", FORMATS)
def test_pageable_memcpy_what_if(fmt: str) -> None:
    """Nothing runs while the pageable copy blocks the host, so making it free saves the whole
    blocking stretch: the copy operator (aten::to, whose duration is exactly the expected
    compute-idle time charged to pageable_memcpy) or, in Nsight, the copy call itself."""
    truth = _truth("pageable_memcpy")["per_step"]
    t, cp, pred = _analyze(SYNTH / f"pageable_memcpy.{fmt}", {"pg": {"pageable_memcpy": 0}})
    for w, want in zip(_windows(cp), truth, strict=True):
        call = _in(t.events, w).filter(pl.col("name") == "cudaMemcpyAsync").sort("dur_ns", descending=True).row(0, named=True)
        blocked = _outermost(t.events, call, r"^aten::to$")
        assert _predicted(pred["pg"], w["step"]) == w["wall_ns"] - blocked["dur_ns"]
        if fmt == "kineto.json":
            assert blocked["dur_ns"] == want["compute_idle_by_cause"]["pageable_memcpy"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_launch_bound_what_if(fmt: str) -> None:
    """Each tiny kernel runs inside its own 10 µs launch operator, so the host's launch work is
    the whole path; halving it halves the step (Kineto: the operators; Nsight records only
    the cudaLaunchKernel calls, the rest is untraced host time that stays)."""
    t, cp, pred = _analyze(SYNTH / f"launch_bound.{fmt}", {"half": {"launch_bound": 0.5}})
    for w in _windows(cp):
        calls = _in(t.events, w).filter(pl.col("name") == "cudaLaunchKernel")
        if fmt == "kineto.json":
            launch_ns = sum(_outermost(t.events, c, r"^aten::add_?$")["dur_ns"] for c in calls.iter_rows(named=True))
            assert launch_ns == w["wall_ns"]
        else:
            launch_ns = int(calls["dur_ns"].sum())
        assert _predicted(pred["half"], w["step"]) == w["wall_ns"] - launch_ns // 2


# --------------------------------------------------------------------------------------------
# scenarios built here, with the project's generator, where overlap matters


def _scenario(name: str, body: Callable[[Any], None]) -> Any:
    b = synth.Builder(pid=synth.MAIN_PID, device=0)
    body(b)
    synth.finish(b)
    return synth.Scenario(
        name=name, stem=name, description=name, rank=0, world_size=1, pid=b.pid, tid=b.tid, device=b.device,
        stream=b.stream, n_devices=1, steps=sorted(b.steps, key=lambda s: s.start),
        cpu_ops=sorted(b.cpu_ops, key=lambda o: (o.start, -o.end, o.ext_id)), runtime=b.runtime, gpu_ops=b.gpu_ops,
        syncs=b.syncs, nvtx=sorted(b.nvtx, key=lambda r: (r.start, -r.end)), segments=b.segments,
        profiler_start=synth.FIRST_STEP_NS - synth.PROFILER_MARGIN_NS,
        profiler_end=max(b.now, b.tail) + synth.PROFILER_MARGIN_NS,
    )


def _load_after_launch(load_ms: int) -> Callable[[Any], None]:
    """Launch 60 ms of kernels, then load the next batch on the host (overlapping the GPU), then .item()."""

    def body(b: Any) -> None:
        for n in range(1, 5):
            with b.step(n):
                synth.launch_body(b, synth.BODY_60MS)
                with b.cause("data_loading"), b.nvtx_range("data loading"), b.op(synth.DATALOADER_SINGLE, "user_annotation"):
                    b.advance(load_ms * MS)
                with b.cause("host_device_sync"):
                    synth.item_sync(b)

    return body


def _late_sync(b: Any) -> None:
    """A copy recorded after the kernels, 70 ms of host work, then a sync on its event."""
    for n in range(1, 5):
        with b.step(n):
            synth.launch_body(b, synth.BODY_60MS)
            with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
                b.memcpy(4, 1_500, copy_kind=synth.COPY_DTOH, src=synth.MEM_DEVICE, dst=synth.MEM_PINNED, blocking=False)
            ev = b.event_record()
            with b.cause("cpu_bound"), b.op("log_metrics", "user_annotation"):
                b.advance(70 * MS)
            with b.cause("host_device_sync"):
                b.event_sync(ev)


def _write(tmp_path: Path, sc: Any, fmt: str) -> Path:
    path = tmp_path / f"{sc.stem}.{fmt}"
    (synth.write_kineto if fmt == "kineto.json" else synth.write_nsys)(sc, path)
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_removing_an_overlapped_stall_saves_nothing(tmp_path: Path, fmt: str) -> None:
    """A 40 ms load that runs while the 60 ms of kernels run: the GPU decides the step, so
    removing the load predicts the same step, not the naive step minus 40 ms."""
    _, cp, pred = _analyze(_write(tmp_path, _scenario("overlapped_load", _load_after_launch(40)), fmt), {"dl": {"data_loading": 0}})
    for w in _windows(cp):
        assert _predicted(pred["dl"], w["step"]) == w["wall_ns"]
        assert w["wall_ns"] > 60 * MS > w["wall_ns"] - 40 * MS


@pytest.mark.parametrize("fmt", FORMATS)
def test_removing_a_long_stall_predicts_max_of_cpu_and_gpu_paths(tmp_path: Path, fmt: str) -> None:
    """An 80 ms load after launching 60 ms of kernels.  Without it, the host path is the step
    minus 80 ms; the GPU path is its kernels (unchanged), the .item() copy queued right behind
    them, the sync call's own time after the copy (the whole call: it never waited) and the
    host's tail after the sync.  The prediction is the larger, exactly."""
    t, cp, pred = _analyze(_write(tmp_path, _scenario("long_load", _load_after_launch(80)), fmt), {"dl": {"data_loading": 0}})
    for w in _windows(cp):
        inside = _in(t.events, w)
        copy = inside.filter(pl.col("kind") == "memcpy").row(0, named=True)
        kernels_end = int(inside.filter((pl.col("kind") == "kernel") & (pl.col("end_ns") <= copy["start_ns"]))["end_ns"].max())  # type: ignore[arg-type]
        call = inside.filter(pl.col("name") == "cudaStreamSynchronize").row(0, named=True)
        own = min(call["dur_ns"], call["end_ns"] - copy["end_ns"])
        gpu_path = (kernels_end - w["start_ns"]) + copy["dur_ns"] + own + (w["end_ns"] - call["end_ns"])
        cpu_path = w["wall_ns"] - 80 * MS
        assert _predicted(pred["dl"], w["step"]) == max(cpu_path, gpu_path) == gpu_path
        assert gpu_path > 60 * MS > 20 * MS > cpu_path  # a naive subtraction would say ~0.2 ms


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_sync_after_an_overlapped_copy_costs_nothing(tmp_path: Path, fmt: str) -> None:
    """The event the host waits on completed ~10 ms before it asks: removing the sync saves
    only the call's own duration, not a wait (compare host_sync, where it saves 15 ms)."""
    t, cp, pred = _analyze(_write(tmp_path, _scenario("late_sync", _late_sync), fmt), {"sync": {"host_device_sync": 0}})
    for w in _windows(cp):
        call = _in(t.events, w).filter(pl.col("name") == "cudaEventSynchronize").row(0, named=True)
        assert call["dur_ns"] < 10_000
        assert _predicted(pred["sync"], w["step"]) == w["wall_ns"] - call["dur_ns"]
    # the event sync is tied to the copy it waits on through the recorded event
    sync_edges = cp.edges.filter(pl.col("kind") == "sync")
    assert sync_edges.height
    assert not sync_edges["inferred"].any()


# --------------------------------------------------------------------------------------------
# HTA's published behaviour on its critical-path traces


def _graph(path: Path, window: tuple[int, int] | None = None) -> tuple[TraceTables, pl.DataFrame]:
    """Edges with the GPU activity (if any) at each end: src_event, dst_event."""
    t = tracekit.read_trace(path, cache=False)
    if window is None:
        steps = find_steps(t.events, t.links).frame
    else:
        steps = pl.DataFrame(
            {"rank": [0], "step": [0], "start_ns": [window[0]], "end_ns": [window[1]], "cpu_end_ns": [window[1]], "complete": [True]},
            schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "cpu_end_ns": pl.Int64, "complete": pl.Boolean},
        )
    g = build_graph(t.events, t.links, steps)
    gpu = g.nodes.filter(pl.col("event_id").is_not_null()).select("node", "event_id")
    edges = g.edges.join(gpu.rename({"node": "src", "event_id": "src_event"}), on="src", how="left").join(
        gpu.rename({"node": "dst", "event_id": "dst_event"}), on="dst", how="left"
    )
    return t, edges


def _by_corr(t: TraceTables, corr: int, kinds: tuple[str, ...] = ("kernel", "memcpy", "memset")) -> int:
    return int(t.events.filter((pl.col("correlation") == corr) & pl.col("kind").is_in(list(kinds)))["event_id"][0])


def test_event_sync_edges_follow_the_recorded_events() -> None:
    """HTA: two GPU → host dependencies start at the spin kernel recorded before the CUDA event.
    tracekit keeps the one into cudaEventSynchronize (explicit, through the event's record)
    and deliberately none into cudaEventQuery, which returns without waiting."""
    t, edges = _graph(shared_trace("hta/tests/data/critical_path/cuda_event_sync/event_sync_trace.json.gz"))
    names = t.events.select("event_id", "name")
    sync = edges.filter(pl.col("kind") == "sync").join(names, on="event_id").join(
        names.rename({"event_id": "src_event", "name": "source"}), on="src_event"
    )
    by_call = {r["name"]: r for r in sync.iter_rows(named=True)}
    assert "spin_kernel" in by_call["cudaEventSynchronize"]["source"]
    assert not by_call["cudaEventSynchronize"]["inferred"]
    assert by_call["cudaStreamSynchronize"]["source"].startswith("Memcpy DtoH")
    assert "cudaDeviceSynchronize" in by_call
    assert "cudaEventQuery" not in by_call


def test_stream_wait_event_is_a_cross_stream_edge() -> None:
    """HTA: a GPU → GPU sync edge from the kernel recorded on stream 20 to the first work the
    wait held back on stream 24."""
    path = shared_trace("hta/tests/data/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz")
    t, edges = _graph(path)
    cross = edges.filter((pl.col("kind") == "cross_stream") & ~pl.col("inferred"))
    assert (_by_corr(t, 27), _by_corr(t, 1411)) in set(cross.select("src_event", "dst_event").iter_rows())


def _measure_window(t: TraceTables) -> tuple[int, int]:
    ann = t.events.filter(pl.col("name") == "[param|pytorch.model.alex_net|0|0|0|measure|forward]").sort("start_ns")
    w = ann.row(1, named=True)  # HTA's unit test: instance_id=1
    return int(w["start_ns"]), int(w["end_ns"])


def test_simple_add_edges_match_htas_unit_test() -> None:
    """HTA's test_critical_path_analysis on the same window: the fft kernel's launch delay is
    27 µs, the kernel after it starts 7 µs after it on the stream, and the device sync waits
    on the window's last kernel.  (HTA gives the queued kernel's launch edge weight 0; tracekit
    keeps the typical launch latency there — a lower bound that matters in what-ifs.)"""
    path = shared_trace("hta/tests/data/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz")
    t0 = tracekit.read_trace(path, cache=False)
    t, edges = _graph(path, _measure_window(t0))
    fft, gemm = _by_corr(t, 5597), _by_corr(t, 5604)
    into = edges.filter(pl.col("dst_event").is_in([fft, gemm]) & pl.col("kind").is_in(["launch", "stream"]))
    weights = {(r["dst_event"], r["kind"]): r["w"] for r in into.iter_rows(named=True)}
    assert weights[(fft, "launch")] == 27_000
    assert weights[(gemm, "stream")] == 7_000
    assert 0 < weights[(gemm, "launch")] < 27_000
    sync = edges.filter(pl.col("kind") == "sync").join(t.events.select("event_id", "name"), on="event_id")
    assert sync["name"].to_list() == ["cudaDeviceSynchronize"]
    window = t.events.filter(pl.col("kind") == "kernel").filter(pl.col("end_ns") <= sync["end_ns"][0])
    assert sync["src_event"][0] == window.sort("end_ns")["event_id"][-1]
    cp = critical_path_window(t.events, t.links, 0, *_measure_window(t0))
    assert cp.steps["path_ns"][0] == cp.steps["wall_ns"][0]


def test_alexnet_cross_stream_edge() -> None:
    """HTA: a GPU → GPU edge from the fft kernel on stream 20 (correlation 5606) to the
    elementwise kernel on stream 7 (5629), from the recorded Stream Wait Event."""
    path = shared_trace("hta/tests/data/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    t0 = tracekit.read_trace(path, cache=False)
    t, edges = _graph(path, _measure_window(t0))
    cross = edges.filter(pl.col("kind") == "cross_stream")
    assert (_by_corr(t, 5606), _by_corr(t, 5629)) in set(cross.select("src_event", "dst_event").iter_rows())


def test_hta_overlay_on_simple_add() -> None:
    """HTA's own answer (end_to_end/simple_add/output) marks 624 events critical over the whole
    trace.  Every host event and copy it marks is on tracekit's path too.  The 6 GPU
    activities it adds ran while the host was still busy: they finished before the host
    reached the cudaDeviceSynchronize that follows them, so they held nothing up — HTA counts
    them because it drops the time the host spends in user ranges and between top-level
    operators, tracekit does not (its path is the whole 41.6 s wall time)."""
    base = "hta/tests/data/critical_path/end_to_end/simple_add/"
    overlay = json.loads(gzip.decompress(shared_trace(base + "output/overlaid_critical_path_trace.json.gz").read_bytes()))
    marked = [e for e in overlay["traceEvents"] if e.get("ph") == "X" and e.get("args", {}).get("critical")]
    assert len(marked) == 624
    t, cp, _ = _analyze(shared_trace(base + "input/trace.json.gz"))
    assert cp.steps["path_ns"][0] == cp.steps["wall_ns"][0]
    ev = t.events.with_columns((pl.col("start_ns") // 1000).alias("ts_us"))
    hta = pl.DataFrame({"name": [e["name"] for e in marked], "ts_us": [int(e["ts"]) for e in marked], "cat": [e["cat"] for e in marked]})
    hta = hta.join(ev.select("name", "ts_us", "event_id", "kind", "end_ns"), on=["name", "ts_us"], how="left")
    assert hta["event_id"].null_count() == 0
    ours = set(cp.segments["event_id"].drop_nulls().to_list())
    hta = hta.with_columns(pl.col("event_id").is_in(list(ours)).alias("ours"))
    host_or_copy = hta.filter(pl.col("cat").is_in(["cpu_op", "cuda_runtime", "gpu_memcpy"]))
    assert host_or_copy.height == 618
    assert host_or_copy["ours"].all()
    extra = hta.filter(~pl.col("ours"))
    assert sorted(extra["cat"].to_list()) == ["gpu_memset"] + ["kernel"] * 5
    syncs = t.events.filter(pl.col("name") == "cudaDeviceSynchronize").sort("start_ns")
    for gpu_end in extra["end_ns"].to_list():
        next_sync = syncs.filter(pl.col("start_ns") > gpu_end).row(0, named=True)
        assert gpu_end < next_sync["start_ns"]


# --------------------------------------------------------------------------------------------
# properties


def _check_graph(path: Path) -> None:
    t = tracekit.read_trace(path)
    steps = find_steps(t.events, t.links).frame
    g = build_graph(t.events, t.links, steps)
    times = g.nodes.select("node", "t")
    e = g.edges.join(times.rename({"node": "src", "t": "_ts"}), on="src").join(times.rename({"node": "dst", "t": "_td"}), on="dst")
    assert e.height == g.edges.height
    # the recorded schedule satisfies every edge, so no path can be longer than its step
    assert e.filter(pl.col("w") > pl.col("_td") - pl.col("_ts")).height == 0
    for _, group in g.edges.partition_by(["rank", "step"], as_dict=True).items():
        G = nx.DiGraph(list(group.select("src", "dst").iter_rows()))
        assert nx.is_directed_acyclic_graph(G)
    cp = critical_path(t.events, t.links, steps)
    s = cp.steps
    assert (s["cycles_broken"] == 0).all()
    assert (s["path_ns"] <= s["wall_ns"]).all()
    sums = cp.segments.group_by("rank", "step").agg(pl.col("dur_ns").sum()).join(s.select("rank", "step", "path_ns"), on=["rank", "step"])
    assert (sums["dur_ns"] == sums["path_ns"]).all()


def _shared() -> list[Any]:
    if not SHARED_TRACES.exists():
        return []
    paths = sorted(
        [p for p in SHARED_TRACES.rglob("*.json*") if "execution_trace/benchmark_simple_add_et" not in str(p)]
        + list(SHARED_TRACES.rglob("*.sqlite"))
    )
    big = 700_000  # bytes on disk: the big ones run with -m slow
    return [
        pytest.param(p, id=str(p.relative_to(SHARED_TRACES)), marks=[pytest.mark.slow] if p.stat().st_size > big else [])
        for p in paths
    ]


@pytest.mark.shared
@pytest.mark.parametrize("path", _shared())
def test_every_shared_trace_gets_a_sound_critical_path(path: Path) -> None:
    _check_graph(path)


@st.composite
def _random_trace(draw: st.DrawFn) -> TraceTables:
    """A training thread issuing launches, syncs and host work onto two streams, with a
    helper thread launching too; every GPU and sync time follows from the causes."""
    rows: list[dict[str, Any]] = []
    t, corr = 1_000_000, 0
    stream_free = {7: 0, 8: 0}
    pid, main, helper = 10, 10, 11

    def launch(tid: int, start: int, stream: int) -> int:
        nonlocal corr
        corr += 1
        call = draw(st.integers(2_000, 20_000))
        rows.append({"kind": "runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid, "start_ns": start, "dur_ns": call, "correlation": corr})
        begin = max(start + draw(st.integers(1_000, 8_000)), stream_free[stream]) + draw(st.sampled_from([0, 0, 0, 70_000]))
        dur = draw(st.integers(1_000, 400_000))
        rows.append({"kind": "kernel", "name": f"k{corr}", "pid": pid, "device": 0, "stream": stream, "start_ns": begin, "dur_ns": dur, "correlation": corr})
        stream_free[stream] = begin + dur
        return start + call

    for step in range(draw(st.integers(1, 3))):
        begin = t
        for _ in range(draw(st.integers(1, 12))):
            action = draw(st.sampled_from(["op", "op", "launch", "launch", "sync", "gap"]))
            if action == "op":
                d = draw(st.integers(1_000, 300_000))
                rows.append({"kind": "cpu_op", "name": "aten::work", "pid": pid, "tid": main, "start_ns": t, "dur_ns": d})
                t += d
            elif action == "launch":
                end = launch(main, t + 500, draw(st.sampled_from([7, 8])))
                rows.append({"kind": "cpu_op", "name": "aten::mm", "pid": pid, "tid": main, "start_ns": t, "dur_ns": end - t + 500})
                t = end + 500
            elif action == "sync":
                corr += 1
                stream = draw(st.sampled_from([7, 8]))
                end = max(t + 3_000, stream_free[stream] + 2_000)
                rows.append({"kind": "runtime", "name": "cudaStreamSynchronize", "pid": pid, "tid": main, "start_ns": t, "dur_ns": end - t, "correlation": corr})
                t = end
            else:
                t += draw(st.integers(1_000, 200_000))
            if draw(st.booleans()):
                launch(helper, t - 500, 8)
        rows.append({"kind": "annotation", "name": f"ProfilerStep#{step}", "pid": pid, "tid": main, "start_ns": begin, "dur_ns": t - begin})
        t += draw(st.integers(0, 5_000))
    frame = pl.DataFrame(rows, schema_overrides={"device": pl.Int32}).with_columns(pl.lit(0, dtype=pl.Int32).alias("rank"))
    events = finalize_events(frame.with_columns(pl.col("kind").cast(pl.String)))
    launches = events.filter(pl.col("kind") == "runtime").select(pl.col("event_id").alias("launch_event_id"), "correlation")
    gpu = events.filter(pl.col("kind") == "kernel").select(pl.col("event_id").alias("gpu_event_id"), "correlation")
    links = LINKS.conform(launches.join(gpu, on="correlation").with_columns(pl.lit("correlation").alias("link_source")))
    return TraceTables(info=TraceInfo(path="random", format="kineto"), events=events, links=links)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tables=_random_trace())
def test_random_traces_give_a_dag_whose_path_is_the_step(tables: TraceTables) -> None:
    steps = find_steps(tables.events, tables.links).frame
    g = build_graph(tables.events, tables.links, steps)
    times = g.nodes.select("node", "t")
    e = g.edges.join(times.rename({"node": "src", "t": "_ts"}), on="src").join(times.rename({"node": "dst", "t": "_td"}), on="dst")
    assert e.filter(pl.col("w") > pl.col("_td") - pl.col("_ts")).height == 0
    slower, faster = WhatIf.of({"kernels": 2.0}), WhatIf.of({"launch_bound": 0.5, "cpu_bound": 0.5})
    cp = critical_path(tables.events, tables.links, steps, what_ifs=[slower, faster, WhatIf.of({"host_device_sync": 0})])
    s = cp.steps
    assert (s["cycles_broken"] == 0).all()
    # the training thread is recorded from start to end: the path explains the whole step
    assert (s["path_ns"] == s["wall_ns"]).all()
    for r in cp.what_ifs:
        p = r.per_step
        if r.what_if == slower:
            assert (p["predicted_step_ns"] >= p["wall_ns"]).all()
        else:
            assert (p["predicted_step_ns"] <= p["wall_ns"]).all()
            assert (p["predicted_step_ns"] >= 0).all()


# --------------------------------------------------------------------------------------------
# the what-if vocabulary, findings and the command line


def test_what_if_vocabulary() -> None:
    assert parse_what_if("data_loading=0") == ("data_loading", 0.0)
    assert parse_what_if(" kernels = 0.5 ") == ("kernels", 0.5)
    for bad in ("nonsense=0", "kernels", "kernels=fast", "kernels=-1", "kernels=inf"):
        with pytest.raises(UsageError):
            parse_what_if(bad)
    with pytest.raises(UsageError) as err:
        WhatIf.of({"gpu": 0.5})
    assert all(name in (err.value.hint or "") for name in WHAT_IF_CAUSES)
    # the analysis causes of docs/analysis.md all have a what-if
    for cause in ("data_loading", "host_device_sync", "pageable_memcpy", "launch_bound", "allocator", "exposed_communication", "cpu_bound"):
        assert cause in WHAT_IF_CAUSES


def _result(base: float, predicted: float) -> WhatIfResult:
    return WhatIfResult(what_if=WhatIf.of({"kernels": 1.0}), per_step=pl.DataFrame(), baseline_step_ms=base, predicted_step_ms=predicted)


def test_findings_rank_by_saving_not_by_time() -> None:
    def finding(kind: str, ms: float) -> Finding:
        return Finding(kind=kind, title=kind, ms_per_step=ms, share_of_step=ms / 100, evidence={}, fix="")

    found = [finding("data_loading", 10.0), finding("cpu_bound", 5.0), finding("allocator", 1.0)]
    ranked = rank_by_saving(found, {"data_loading": _result(100, 98), "cpu_bound": _result(100, 95)})
    assert [f.kind for f in ranked] == ["cpu_bound", "data_loading", "allocator"]
    assert ranked[0].predicted_step_ms == 95
    assert ranked[2].predicted_step_ms is None


def test_diagnose_fills_predicted_step_times() -> None:
    d = diagnose(tracekit.read_trace(SYNTH / "host_sync.kineto.json", cache=False), what_if=[{"kernels": 0.5}])
    assert d.critical_path is not None
    f = d.findings[0]
    assert f.kind == "host_device_sync"
    # priced by the replay: the recorded loop without the sync runs 60.00 ms
    fixed = diagnose(tracekit.read_trace(SYNTH / "host_sync_fixed.kineto.json", cache=False)).step_ms_median
    assert f.predicted_step_ms == pytest.approx(fixed, abs=0.01)
    assert [w.what_if.label for w in d.what_ifs] == ["kernels=0.5"]
    assert d.what_ifs[0].predicted_step_ms == pytest.approx(d.step_ms_mean - 30.0, abs=1e-6)


def test_analyze_what_if_cli(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(SYNTH / "dataloader_stall.kineto.json")
    assert main(["analyze", path, "--no-cache", "--what-if", "data_loading=0", "--what-if", "kernels=0.5"]) == 0
    out = capsys.readouterr().out
    assert "What decides the step time: the critical path" in out
    assert "data_loading=0" in out
    assert "60.01 ms (saves 40.00 ms per step)" in out
    assert "data_loading=0, kernels=0.5" in out  # the combination is answered too
    assert main(["analyze", path, "--no-cache", "--format", "json", "--what-if", "data_loading=0"]) == 0
    report = json.loads(capsys.readouterr().out)
    cp = report["critical_path"]
    assert cp["coverage"] == 1.0
    assert cp["breakdown_ms_per_step"]["data_loading"] == pytest.approx(40.0)
    assert cp["what_if"][0]["saving_ms"] == pytest.approx(40.0)
    assert report["findings"][0]["predicted_step_ms"] == pytest.approx(60.0136, abs=1e-4)
    assert main(["analyze", path, "--what-if", "gpu=0"]) == 2
    err = capsys.readouterr().err
    assert "unknown what-if cause 'gpu'" in err
    assert "data_loading" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("fmt", FORMATS)
def test_annotate_writes_a_loadable_trace(tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    src = SYNTH / f"dataloader_stall.{fmt}"
    out = tmp_path / "annotated.json.gz"
    assert main(["annotate", str(src), "--out", str(out), "--no-cache"]) == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    ev = doc["traceEvents"]
    flows = [e for e in ev if e["ph"] in ("s", "f")]
    assert flows
    assert {e["args"]["edge_kind"] for e in flows} >= {"launch", "sync"}
    critical = [e for e in ev if e["ph"] == "X" and e.get("args", {}).get("critical")]
    assert {e["cat"] for e in critical} >= {"kernel", "cuda_runtime"}
    lane = [e for e in ev if e.get("cat") == "critical_path" and e["ph"] == "X"]
    orig = diagnose(tracekit.read_trace(src, cache=False))
    assert orig.critical_path is not None
    assert sum(e["args"]["dur_ns"] for e in lane) == int(orig.critical_path.steps["path_ns"].sum())
    assert any(e.get("cat") == "tracekit_finding" for e in ev)
    assert doc["otherData"]["tracekit"]["findings"][0]["kind"] == "data_loading"
    # the annotated trace reads back as the same trace: same kernels, same steps
    back = diagnose(tracekit.read_trace(out, cache=False))
    assert back.kernels.kernel_count == orig.kernels.kernel_count
    assert back.step_ms_median == pytest.approx(orig.step_ms_median, abs=1e-3)
    # one step, only what is critical
    one = tmp_path / "one.json"
    assert main(["annotate", str(src), "--out", str(one), "--step", "3", "--critical-only"]) == 0
    small = json.loads(one.read_text())["traceEvents"]
    xs = [e for e in small if e["ph"] == "X" and e["cat"] not in ("critical_path", "tracekit_finding", "user_annotation")]
    assert xs
    assert all(e["args"]["critical"] for e in xs)
    assert main(["annotate", str(src), "--out", str(one), "--step", "99"]) == 2
    assert "no step window matches" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# steps built in groups (bounded memory on long traces)

_GROUPED = [
    SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json",
    SAMPLE_TRACES / "synthetic" / "dataloader_stall.kineto.json",
    SAMPLE_TRACES / "captures" / "slow_dataloader" / "rank0.cycle0.pt.trace.json.gz",
    # an operator that launches in one step and runs on into the next (it dispatches in both)
    SHARED_TRACES / "tracelens" / "b200" / "eager_trace.json.gz",
]


@pytest.mark.parametrize("path", _GROUPED, ids=lambda p: p.name)
def test_steps_built_in_groups_give_the_same_paths(path: Path) -> None:
    """One step per group and all steps at once: the same segments, breakdown, per-step rows,
    edges (but for node and run ids) and what-if answers."""
    if not path.exists():
        pytest.skip(f"real trace not available: {path}")
    t = tracekit.read_trace(path)
    steps = find_steps(t.events).frame
    assert steps.height >= 2
    wis = [WhatIf.of({"launch_bound": 0.0}), WhatIf.of({"kernels": 0.5}), WhatIf.of({"host_device_sync": 0.0, "data_loading": 0.0})]
    whole = critical_path(t.events, t.links, steps, what_ifs=wis)
    grouped = critical_path(t.events, t.links, steps, what_ifs=wis, batch_events=1)
    assert grouped.segments.equals(whole.segments)
    # shares are ns / path_ns: polars may divide a different way on a differently chunked frame (1 ulp)
    assert_frame_equal(grouped.breakdown, whole.breakdown, check_exact=False)
    assert grouped.steps.equals(whole.steps)
    assert [r.per_step.to_dicts() for r in grouped.what_ifs] == [r.per_step.to_dicts() for r in whole.what_ifs]
    a, b = (cp.edges.drop("src", "dst", "run") for cp in (whole, grouped))
    assert a.sort(a.columns, nulls_last=True).equals(b.sort(b.columns, nulls_last=True))
    # node ids stay unique across groups: no two steps share a node
    nodes = pl.concat([grouped.edges.select(*("rank", "step"), pl.col(c).alias("node")) for c in ("src", "dst")]).unique()
    assert nodes.select("node").n_unique() == nodes.height


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edges=st.lists(
        st.tuples(st.integers(0, 14), st.integers(0, 14), st.integers(-5, 40), st.integers(-5, 40), st.integers(0, 40)),
        min_size=1, max_size=60,
    )
)
def test_what_if_lengths_equal_networkx_longest_path(edges: list[tuple[int, int, int, int, int]]) -> None:
    """The one-pass lengths of every scenario equal networkx's ``dag_longest_path`` summed
    along its path, weight by weight (negative weights included: a path may start anywhere)."""
    from tracekit.analysis.critical_path.longest import longest_lengths as longest_lengths
    from tracekit.analysis.critical_path.longest import path_length as path_length

    G = nx.DiGraph()
    for u, v, a, b, c in edges:
        if u < v:  # acyclic: edges go forward in node order
            G.add_edge(u, v, w=a, s0=b, s1=c)
    if G.number_of_edges() == 0:
        return
    topo = list(nx.topological_sort(G))
    attrs = ["w", "s0", "s1"]
    expected = [path_length(G, nx.dag_longest_path(G, weight=a, topo_order=topo), a) for a in attrs]
    assert longest_lengths(G, topo, attrs) == expected


# --------------------------------------------------------------------------------------------
# the native longest-path kernel (tracekit/native/_dag.c) against the networkx path


def _random_steps(draw_edges: list[list[tuple[int, int, int, int]]], cyclic: bool) -> pl.DataFrame:
    """Step graphs from drawn edges (u, v, w, s): acyclic unless ``cyclic`` (an edge that goes
    backwards closes a loop); node ids are scattered so the kernel has to number them."""
    rows = []
    for step, edges in enumerate(draw_edges):
        seen = set()
        for u, v, w, s in edges:
            a, b = (u, v) if (u < v or cyclic) else (v, u)
            if a == b or (a, b) in seen:
                continue
            seen.add((a, b))
            rows.append((0, step, a * 7919 + step * 1_000_003, b * 7919 + step * 1_000_003, w, s))
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "step": pl.Int64, "src": pl.Int64, "dst": pl.Int64, "w": pl.Int64, "s": pl.Int64}, orient="row")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(-3, 3), st.integers(-(10**15), 5)), min_size=0, max_size=40),
        min_size=1, max_size=4,
    ),
    cyclic=st.booleans(),
)
def test_native_paths_equal_networkx(steps: list[list[tuple[int, int, int, int]]], cyclic: bool) -> None:
    """The kernel's paths (nodes, ties broken alike), lengths, node counts and what-if lengths
    equal networkx's on random step graphs with many ties, negative weights and, when a drawn
    edge closes a loop, cycles (which the kernel leaves to the networkx path)."""
    from tracekit.analysis.critical_path import longest as cp

    if cp.native_dag() is None:
        pytest.skip("the native kernel is not built here")
    edges = _random_steps(steps, cyclic)
    native = (cp.step_paths(edges), cp.step_lengths(edges, ["w", "s"]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACEKIT_PURE_PYTHON", "1")
        assert cp.native_dag() is None
        pure = (cp.step_paths(edges), cp.step_lengths(edges, ["w", "s"]))
    key = ["rank", "step"]
    assert_frame_equal(native[0][0].sort([*key, "seq"]), pure[0][0].sort([*key, "seq"]))
    assert_frame_equal(native[0][1].sort(key), pure[0][1].sort(key))
    assert sorted(native[1]) == sorted(pure[1])


def test_native_kernel_rejects_bad_buffers() -> None:
    """Hostile input gets a clear error from the kernel, never a read out of bounds."""
    from array import array

    from tracekit.analysis.critical_path import longest as cp

    dag = cp.native_dag()
    if dag is None:
        pytest.skip("the native kernel is not built here")
    src, dst, w = array("q", [1, 2]), array("q", [2, 3]), array("q", [5, 6])
    lengths, nodes, status, path, offsets = dag.longest_paths(src, dst, [w], array("q", [0, 2]), True)
    assert list(memoryview(lengths).cast("q")) == [11]
    assert list(memoryview(path).cast("q")) == [1, 2, 3]
    assert list(memoryview(nodes).cast("q")) == [3]
    assert list(memoryview(status).cast("q")) == [0]
    assert list(memoryview(offsets).cast("q")) == [0, 3]
    for bad in ([0, 3], [1, 2], [0, 2, 1, 2]):
        with pytest.raises(ValueError, match="offsets"):
            dag.longest_paths(src, dst, [w], array("q", bad), True)
    with pytest.raises(ValueError, match="dst"):
        dag.longest_paths(src, array("q", [2]), [w], array("q", [0, 2]), True)
    with pytest.raises(ValueError, match="weight"):
        dag.longest_paths(src, dst, [array("q", [1])], array("q", [0, 2]), True)
    with pytest.raises(ValueError, match="int64"):
        dag.longest_paths(b"abc", dst, [w], array("q", [0, 2]), True)
    with pytest.raises(ValueError, match="weight is needed"):
        dag.longest_paths(src, dst, [], array("q", [0, 2]), True)
    # a cycle is reported, not solved
    _, _, status, _, _ = dag.longest_paths(array("q", [1, 2]), array("q", [2, 1]), [w], array("q", [0, 2]), True)
    assert list(memoryview(status).cast("q")) == [1]


def test_result_frames_are_compact_and_answer_like_the_full_graph() -> None:
    """The segments hold their declared dtypes (track categorical, edge kind and cause enums);
    the edges keep a ``w_<tag>`` column only for tags that carry time, and a what-if over them
    answers exactly as over the edges with every tag's column (the missing ones zero)."""
    from tracekit.analysis.critical_path import SEGMENT_SCHEMA, evaluate
    from tracekit.analysis.whatif import TAGS

    _, cp, _ = _analyze(SYNTH / "dataloader_stall.kineto.json")
    assert dict(cp.segments.schema) == SEGMENT_SCHEMA
    assert set(cp.segments["cause"].cast(pl.String).unique()) <= set(SEGMENT_SCHEMA["cause"].categories)  # type: ignore[attr-defined]
    kept = [c for c in cp.edges.columns if c.startswith("w_")]
    assert kept
    assert len(kept) < len(TAGS)
    assert all(cp.edges[c].ne(0).any() for c in kept)
    full = cp.edges.with_columns(
        *[pl.lit(0, dtype=pl.Int64).alias(f"w_{t}") for t in TAGS if f"w_{t}" not in cp.edges.columns]
    )
    wis = [WhatIf.of({"data_loading": 0.0}), WhatIf.of({"kernels": 0.5, "launch_bound": 0.0})]
    for ours, theirs in zip(evaluate(cp.edges, cp.steps, wis), evaluate(full, cp.steps, wis), strict=True):
        assert ours.per_step.equals(theirs.per_step)
        assert ours.predicted_step_ms == theirs.predicted_step_ms
    assert cp.what_if({"data_loading": 0.0}).per_step["predicted_step_ns"].max() < cp.steps["wall_ns"].max()
