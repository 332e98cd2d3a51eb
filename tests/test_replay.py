"""The replay model (tracekit/analysis/replay.py) held to the loop simulator's truth (tests/loopsim).

Truth is the simulated loop re-simulated with the fix applied, never the analysis' own
assumption; the replay sees only the Kineto trace the simulator wrote.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from pathlib import Path

import networkx as nx
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopsim import FIXES, INTERMITTENT, SCENARIOS, Loop, mean_truth, simulate, truth, write_kineto
from loopsim.kineto import kineto_events

import tracekit
from tracekit.analysis import diagnose
from tracekit.analysis.critical_path import EdgeKind, build_graph
from tracekit.analysis.replay import FIX_MODELS, Edit, _order, _sweep, fix_edit, replay, replay_schedule
from tracekit.analysis.steps import find_steps

#: the replay's accuracy targets: mean what-if error, worst what-if error, largest finding on the control
MEAN_ERROR, WORST_ERROR, CONTROL_SHARE = 0.05, 0.15, 0.05


def _tables(loop: Loop, tmp: Path) -> tracekit.TraceTables:
    return tracekit.read_trace(write_kineto(simulate(loop), tmp / f"{loop.name}.json"))


def _replay(loop: Loop, tmp: Path, kinds: tuple[str, ...]) -> tuple[object, float]:
    tables = _tables(loop, tmp)
    steps = find_steps(tables.events, tables.links).frame
    edits = [e for k in kinds if (e := fix_edit(k)) is not None]
    return replay(tables.events, tables.links, steps, edits), simulate(loop).steady_step_ns / 1e6


def test_simulator_truth_is_a_resimulation() -> None:
    # removing the sync of a loop that loads on the main thread lets the host load the next
    # batch while the GPU computes: the truth is max(host, GPU), not "step minus the sync"
    loop, _ = SCENARIOS["sync_prevents_overlap"]
    run = simulate(loop)
    fixed = truth(loop, "host_device_sync") / 1e6
    assert run.steady_step_ns / 1e6 > fixed + 20
    gpu_ms = sum(g.end - g.start for g in run.gpu) / loop.steps / 1e6
    assert fixed == pytest.approx(max(gpu_ms, loop.load_ns / 1e6), rel=0.05)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_replay_reproduces_the_measured_step(name: str, tmp_path: Path) -> None:
    loop, _fixes = SCENARIOS[name]
    r, true_step = _replay(loop, tmp_path, ())
    assert r.error is not None
    assert r.error <= 0.02
    assert r.measured_step_ms == pytest.approx(true_step, rel=0.02)  # type: ignore[attr-defined]


_CASES = [(name, fix) for name, (_, fixes) in SCENARIOS.items() for fix in fixes]
#: a finding kind whose modelled fix is a simulator fix of another name: the launch-bound
#: finding's fix is CUDA graphs (the simulator's own ``launch_bound`` edit, dispatch and launch
#: cost ÷ 20, was the first replay model's assumption, not a behaviour of PyTorch)
TRUTH_OF = {"launch_bound": "cuda_graphs"}


@pytest.mark.parametrize(("name", "fix"), _CASES)
def test_what_if_matches_the_resimulated_fix(name: str, fix: str, tmp_path: Path) -> None:
    loop, _ = SCENARIOS[name]
    r, _step = _replay(loop, tmp_path, (fix,))
    predicted = r.predicted_step_ms(fix)  # type: ignore[attr-defined]
    expected = truth(loop, TRUTH_OF.get(fix, fix)) / 1e6
    assert predicted is not None
    assert abs(predicted - expected) / expected <= WORST_ERROR, (predicted, expected)


def test_mean_what_if_error_within_target(tmp_path: Path) -> None:
    errors = []
    for name, (loop, fixes) in SCENARIOS.items():
        if not fixes or name == "launch_bound":  # launch_bound has its own case (the slowest to replay)
            continue
        r, _ = _replay(loop, tmp_path, fixes)
        for fix in fixes:
            expected = truth(loop, TRUTH_OF.get(fix, fix)) / 1e6
            errors.append(abs(r.predicted_step_ms(fix) - expected) / expected)  # type: ignore[attr-defined]
    assert sum(errors) / len(errors) <= MEAN_ERROR


_INTERMITTENT = [(name, fix) for name, (_, fixes) in INTERMITTENT.items() for fix in fixes]


@pytest.mark.parametrize(("name", "fix"), _INTERMITTENT)
def test_intermittent_stall_is_priced_by_its_mean_saving(name: str, fix: str, tmp_path: Path) -> None:
    # a stall in every k-th step: the median step does not change when it is fixed, the mean
    # does; the replay's mean saving is held to the re-simulated loop's mean steady step
    loop, _ = INTERMITTENT[name]
    run = simulate(loop)
    # the median step barely sees it: most of the fix's saving is in the stalled steps
    assert run.mean_steady_step_ns - mean_truth(loop, fix) > 2 * (run.steady_step_ns - truth(loop, fix))
    r, _step = _replay(loop, tmp_path, (fix,))
    saving = r.mean_saving_ms(fix)  # type: ignore[attr-defined]
    assert saving is not None
    predicted = run.mean_steady_step_ns / 1e6 - saving
    expected = mean_truth(loop, fix) / 1e6
    assert expected < run.mean_steady_step_ns / 1e6 * 0.9  # the fix matters on the mean step
    assert abs(predicted - expected) / expected <= WORST_ERROR, (predicted, expected)


@pytest.mark.parametrize("name", ["loader_stalls", "worker_stalls"])
def test_diagnosis_states_an_intermittent_cause_by_its_mean_saving(name: str, tmp_path: Path) -> None:
    loop, _ = INTERMITTENT[name]
    fix = "data_loading"
    run = simulate(loop)
    d = diagnose(tracekit.read_trace(write_kineto(run, tmp_path / f"{name}.json"), cache=False))
    found = {f.kind: f for f in d.findings}
    f = found[fix]
    assert f.modelled_fix is not None  # priced by the replay, not the critical path
    assert f.evidence["intermittent"]["statistic"] == "mean saving per steady step"
    true_saving = (run.mean_steady_step_ns - mean_truth(loop, fix)) / 1e6
    assert f.ms_per_step == pytest.approx(true_saving, rel=WORST_ERROR)
    # the prediction stays on the headline's statistic: the median step, which the stall barely moves
    assert f.predicted_step_ms == pytest.approx(truth(loop, fix) / 1e6, rel=WORST_ERROR)
    assert f.evidence["intermittent"]["predicted_mean_step_ms"] == pytest.approx(mean_truth(loop, fix) / 1e6, rel=WORST_ERROR)
    # the report says the cost is a mean over steps that a stall hits only sometimes
    from tracekit.report.text import render_text

    text = render_text(d)
    line = next(x for x in text.splitlines() if x.strip().startswith(f"{f.ms_per_step:,.2f} ms per step"))
    assert "mean over the steady steps" in line
    # and states the mean step once fixed, in the text and the HTML report alike
    from tracekit.report.html import render_html

    mean_ms = f"{f.evidence['intermittent']['predicted_mean_step_ms']:,.2f} ms"
    median_ms = f"the median step becomes {f.predicted_step_ms:,.2f} ms"
    assert f"    predicted mean step if fixed: {mean_ms} (from " in text
    assert median_ms in text
    html = render_html(d)
    assert f"<p>Predicted mean step if fixed: <b>{mean_ms}</b> (from " in html
    assert median_ms + ")</p>" in html


@pytest.mark.parametrize("name", ["healthy", "warmup"])
def test_no_fix_claims_much_on_a_healthy_loop(name: str, tmp_path: Path) -> None:
    loop, fixes = SCENARIOS[name]
    assert fixes == ()
    r, _ = _replay(loop, tmp_path, tuple(FIXES))
    step = r.measured_step_ms  # type: ignore[attr-defined]
    for kind in FIXES:
        assert (r.saving_ms(kind) or 0.0) <= CONTROL_SHARE * step, kind  # type: ignore[attr-defined]


def test_warm_up_step_is_not_the_steady_state(tmp_path: Path) -> None:
    # a 400 ms cudaMalloc burst in the first step: the replay's steady state excludes it
    loop, _ = SCENARIOS["warmup"]
    r, true_step = _replay(loop, tmp_path, ("allocator",))
    assert r.steps.filter(pl.col("steady")).height == r.steps.height - 1  # type: ignore[attr-defined]
    assert r.measured_step_ms == pytest.approx(true_step, rel=0.02)  # type: ignore[attr-defined]
    assert r.saving_ms("allocator") < 0.05 * true_step  # type: ignore[attr-defined]


def test_every_finding_kind_states_its_modelled_fix() -> None:
    from tracekit.analysis.causes import FINDING_KINDS, REPLAYED_FINDINGS

    # the efficiency findings are priced by their own estimates; untraced_idle is priced by no
    # model (its fix is to record the time)
    assert set(FINDING_KINDS) - set(REPLAYED_FINDINGS) == {"fp32_gemm", "small_gemm", "unfused_elementwise", "untraced_idle"}
    for kind in REPLAYED_FINDINGS:
        assert kind in FIX_MODELS
        assert fix_edit(kind) is not None
    assert "2.5" in FIX_MODELS["no_tensor_cores"]
    assert "20" in FIX_MODELS["launch_bound"]


def test_blocking_wait_is_derived_not_replayed(tmp_path: Path) -> None:
    # make the GPU work 3x faster: the .item() sync must wait less, not keep its recorded time
    loop, _ = SCENARIOS["item_per_layer"]
    tables = _tables(loop, tmp_path)
    steps = find_steps(tables.events, tables.links).frame
    faster = Edit("faster", gpu={"kernel": 1 / 3, "fp32_matmul": 1 / 3})
    r = replay(tables.events, tables.links, steps, [faster])
    assert r.saving_ms("faster") > 0.3 * r.measured_step_ms
    # and the step it predicts is the re-simulated loop's whose kernels are 3x faster: had
    # the recorded waits been replayed, the host would still wait as long as it was recorded to
    quick = dataclasses.replace(loop, gemm_ns=loop.gemm_ns // 3, elementwise_ns=loop.elementwise_ns // 3, optimizer_ns=loop.optimizer_ns // 3)
    expected = simulate(quick).steady_step_ns / 1e6
    assert r.predicted_step_ms("faster") == pytest.approx(expected, rel=MEAN_ERROR)


def test_a_blocking_call_replays_only_its_cost_after_the_gpu(tmp_path: Path) -> None:
    # every host edge that ends a blocking call weighs at most what the recording shows after
    # the GPU work it waited for ended: the wait itself is never a weight, only an edge
    loop, _ = SCENARIOS["sync_prevents_overlap"]
    tables = _tables(loop, tmp_path)
    steps = find_steps(tables.events, tables.links).frame
    graph = build_graph(tables.events, tables.links, steps.filter(pl.col("complete")))
    edges = graph.edges
    syncs = edges.filter(pl.col("kind") == EdgeKind.SYNC.value)
    assert syncs.height >= steps.height - 2  # one loss.item() per step
    # the host stretch that ends where a sync edge ends
    into = edges.filter(pl.col("kind").is_in([EdgeKind.CPU.value, EdgeKind.DATA_LOADING.value])).join(
        syncs.select("dst", (pl.col("end_ns") - pl.col("start_ns")).alias("after_gpu")), on="dst"
    )
    assert into.height >= syncs.height
    assert (into["w"] <= into["after_gpu"]).all()
    assert (syncs["w"] <= syncs["end_ns"] - syncs["start_ns"]).all()
    # the recorded waits are long (the host waits for the GPU most of the step), the replayed
    # costs after the GPU short
    waits = tables.events.filter(pl.col("name") == "cudaStreamSynchronize")["dur_ns"]
    assert float(waits.median()) > 50 * float(into["w"].median())  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# property tests: any trace, any graph


def _mutated(loop: Loop, seed: int, drop: float, skew_us: float, break_flows: bool) -> dict[str, object]:
    rng = random.Random(seed)
    events = kineto_events(simulate(loop))
    out = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in ("Trace",) and rng.random() < drop:
            continue  # a dropped event
        if e.get("cat") in ("kernel", "gpu_memcpy") and rng.random() < 0.3:
            e = {**e, "ts": e["ts"] - rng.uniform(0, skew_us)}  # GPU clock skew: may start before its launch
        if break_flows and e.get("ph") in ("s", "f") and rng.random() < 0.3:
            e = {**e, "id": e["id"] + 10_000_000}  # a flow whose other end is missing
        out.append(e)
    return {"schemaVersion": 1, "displayTimeUnit": "ms", "traceEvents": out}


_SMALL = Loop("prop", steps=4, layers=2, elementwise_per_layer=1, gemm_ns=200_000, elementwise_ns=50_000, load_ns=1_000_000)


@pytest.mark.slow  # test_replay_under_the_fuzz_harness runs by default
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    drop=st.sampled_from([0.0, 0.05, 0.2]),
    skew_us=st.sampled_from([0.0, 50.0, 5_000.0]),
    break_flows=st.booleans(),
    sync=st.sampled_from([None, "item", "stream_sync"]),
    pinned=st.booleans(),
)
def test_replay_survives_bad_traces(tmp_path: Path, seed: int, drop: float, skew_us: float, break_flows: bool, sync: str | None, pinned: bool) -> None:
    import dataclasses

    loop = dataclasses.replace(_SMALL, step_sync=sync, pinned=pinned, non_blocking=pinned)
    path = tmp_path / f"p{seed}.json"
    path.write_text(json.dumps(_mutated(loop, seed, drop, skew_us, break_flows)))
    try:
        tables = tracekit.read_trace(path)
    except tracekit.TracekitError:
        return  # rejected with a clear error is fine; a traceback is not
    steps = find_steps(tables.events, tables.links).frame
    edits = [e for k in FIXES if (e := fix_edit(k)) is not None]
    r = replay(tables.events, tables.links, steps, edits)
    for col in r.steps.columns:
        if col.endswith("_ns"):
            assert (r.steps[col].drop_nulls() >= 0).all(), col
    for edit in (None, *edits):
        sched = replay_schedule(tables.events, tables.links, steps, edit).drop_nulls()
        assert (sched["end_ns"] >= sched["start_ns"]).all()
        ordered = sched.sort(["rank", "track", "start_ns", "end_ns"])
        prev_end = pl.col("end_ns").shift(1).over(["rank", "track"])
        overlaps = ordered.filter(pl.col("start_ns") < prev_end)
        assert overlaps.height == 0, overlaps


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(-5, 50)), max_size=120))
def test_sweep_terminates_on_any_graph(raw: list[tuple[int, int, int]]) -> None:
    # any graph, cycles included (clock skew can close one): the sweep ends, and its times
    # satisfy every edge it kept
    edges = pl.DataFrame(
        [(u, v, w) for u, v, w in raw if u != v] or [(0, 1, 0)], schema={"src": pl.Int64, "dst": pl.Int64, "w": pl.Int64}, orient="row"
    )
    plan = _order(edges)
    dist = _sweep(plan, edges, "w")
    kept = {(plan.nodes[u], plan.nodes[v]) for u, v in zip(plan.src, plan.dst, strict=True)}
    G = nx.DiGraph()
    G.add_edges_from(kept)
    assert nx.is_directed_acyclic_graph(G)
    for u, v, w in edges.iter_rows():
        if (u, v) in kept:
            assert dist[v] >= dist[u] + w
    has_cycle = not nx.is_directed_acyclic_graph(nx.DiGraph(list(edges.select("src", "dst").iter_rows())))
    assert (plan.broken > 0) == has_cycle
    assert all(d >= 0 for d in dist.values())


def test_long_traces_replay_a_sample_of_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.analysis import replay as replay_module

    loop = SCENARIOS["sync_prevents_overlap"][0]
    tables = _tables(loop, tmp_path)
    steps = find_steps(tables.events, tables.links).frame
    full = replay_module.price(["host_device_sync"], tables.events, tables.links, steps, 154.18)
    # pretend the trace is long: two groups of 3 steps, from the start and the end of the trace
    monkeypatch.setattr(replay_module, "MAX_REPLAY_EVENTS", 10)
    monkeypatch.setattr(replay_module, "GROUP_EVENTS", 1)
    monkeypatch.setattr(replay_module, "MAX_GROUPS", 2)
    sampled = replay_module.price(["host_device_sync"], tables.events, tables.links, steps, 154.18)
    assert sampled.replay is not None
    assert full.replay is not None
    assert sampled.replay.steps.height == 6 < full.replay.steps.height
    assert sampled.replay.steps["step"].to_list() == [1, 2, 3, 7, 8, 9]
    assert sampled.fixes["host_device_sync"][0] == pytest.approx(full.fixes["host_device_sync"][0], rel=0.02)


def test_groups_replayed_side_by_side_give_what_one_thread_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The groups run on :data:`REPLAY_THREADS` threads; every step's row, in order, is what one
    thread replaying them one after the other gives."""
    from tracekit.analysis import replay as replay_module

    loop = SCENARIOS["sync_prevents_overlap"][0]
    tables = _tables(loop, tmp_path)
    steps = find_steps(tables.events, tables.links).frame
    edits = [e for k in ("host_device_sync", "data_loading") if (e := fix_edit(k)) is not None]
    # groups of 2 steps: several groups, so several run at once
    threaded = replay(tables.events, tables.links, steps, edits, group_steps=2)
    monkeypatch.setattr(replay_module, "REPLAY_THREADS", 1)
    serial = replay(tables.events, tables.links, steps, edits, group_steps=2)
    assert threaded.steps.height >= 6
    assert threaded.steps.equals(serial.steps)


def test_an_error_in_one_group_stops_the_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group that fails raises on the caller's thread, and the groups not started yet are
    not replayed."""
    from tracekit.analysis import replay as replay_module

    loop = SCENARIOS["sync_prevents_overlap"][0]
    tables = _tables(loop, tmp_path)
    steps = find_steps(tables.events, tables.links).frame
    started: list[int] = []
    real = replay_module._prepare_group

    def failing(*args: object) -> object:
        started.append(1)
        if len(started) == 1:
            raise RuntimeError("group failed")
        time.sleep(0.2)  # (the others take a while: the caller sees the error long before they are all done)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(replay_module, "_prepare_group", failing)
    with pytest.raises(RuntimeError, match="group failed"):
        replay(tables.events, tables.links, steps, group_steps=2)
    groups = -(-steps.filter(pl.col("complete")).height // 2)
    assert groups >= 4
    assert len(started) < groups


@pytest.mark.parametrize("kind", ["shuffle", "overlap", "negative_dur", "drop_key", "wrong_type", "duplicate_key", "huge_int", "truncate"])
def test_replay_under_the_fuzz_harness(kind: str, tmp_path: Path) -> None:
    # the parsers' fuzz mutations on a simulated loop with syncs and a pageable copy: every case
    # is replayed (with every fix) or refused with a TracekitError, never another exception
    import dataclasses

    from fuzzing import kineto_mutation, run_case, write_variant

    loop = dataclasses.replace(_SMALL, step_sync="item", item_per_layer=True)
    doc = {"schemaVersion": 1, "traceEvents": kineto_events(simulate(loop))}
    raw = json.dumps(doc).encode()
    edits = [e for k in FIXES if (e := fix_edit(k)) is not None]
    for seed in range(4):
        rng = random.Random(seed)
        path = write_variant(kineto_mutation(doc, raw, rng, kind), tmp_path / f"{kind}{seed}.json", rng)

        def case(path: Path = path) -> None:
            tables = tracekit.read_trace(path, cache=False)
            steps = find_steps(tables.events, tables.links).frame
            r = replay(tables.events, tables.links, steps, edits)
            assert all((r.steps[c].drop_nulls() >= 0).all() for c in r.steps.columns if c.endswith("_ns"))

        assert run_case(case) in ("ok", "refused")
