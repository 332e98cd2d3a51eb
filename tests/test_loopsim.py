"""The loop simulator itself (tests/loopsim), checked against first principles.

The replay tests hold the analysis to the simulator; these hold the simulator to what real
PyTorch and CUDA do: the autograd device thread, CUDA graphs, element-wise transfers, the
pin-memory thread, the workers' hand-off, fixes applied together, and the original
scenarios' traces and truths exactly as they were.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import itertools
import json
import statistics
from collections import Counter
from pathlib import Path

import pytest
from conftest import shared_trace
from loopsim import (
    BEHAVIOURS,
    FIXES,
    INTERMITTENT,
    PLANS,
    SCENARIOS,
    Loop,
    Run,
    apply_fixes,
    mean_truth,
    simulate,
    subset_truths,
    truth,
    write_kineto,
)
from loopsim.jobsim import JOBS, JobSpec, simulate_job
from loopsim.kineto import PID, THREAD_ROWS, kineto_events
from loopsim.loop import (
    FILL,
    GRAPH_CALL_NS,
    GRAPH_GAP_NS,
    GRAPH_NODE_NS,
    LAUNCH_LATENCY_NS,
    PIN_QUEUE_NS,
    RESNET50_HANDOFF_NS,
    RESNET50_HANDOFF_NS_PER_BYTE,
    THREAD_WAKE_NS,
    WAKE_NS,
)
from loopsim.sim import HostEv

import tracekit

BASELINE = Path(__file__).parent / "data" / "loopsim_baseline.json"
#: the fixes the original scenarios' truths were recorded for
ORIGINAL_FIXES = ("data_loading", "host_device_sync", "pageable_memcpy", "launch_bound", "allocator", "no_tensor_cores", "cpu_bound")
AUTOGRAD_TID = THREAD_ROWS["autograd"][0]
PIN_TID = THREAD_ROWS["pin"][0]

#: a small loop whose GPU work is negligible (the host sets the pace)
_HOST_BOUND = Loop("host_bound", steps=5, layers=6, elementwise_per_layer=2, gemm_ns=2_000, elementwise_ns=1_000, optimizer_ns=2_000,
                   num_workers=2, load_ns=100_000, pinned=True, non_blocking=True, batch_bytes=1 << 20)
#: a small GPU-bound loop with a loss.item() at the end of each step
_GPU_BOUND = Loop("gpu_bound", steps=5, layers=4, gemm_ns=400_000, elementwise_ns=100_000, num_workers=2, load_ns=1_000_000,
                  pinned=True, non_blocking=True, batch_bytes=4 << 20, step_sync="item")


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()


def _steps(run: Run) -> list[tuple[int, int]]:
    """Each step's [start, next start) on the host."""
    bounds = [*run.step_starts, run.host_end]
    return list(itertools.pairwise(bounds))


def _in_step(run: Run, k: int, thread: str | None = None) -> list[HostEv]:
    lo, hi = _steps(run)[k]
    return [h for h in run.host if lo <= h.start < hi and (thread is None or h.thread == thread)]


def _host_step_ns(run: Run) -> float:
    """The median host time of a steady step (when the host, not the GPU, sets the pace)."""
    return float(statistics.median(b - a for a, b in _steps(run)[1:]))


# --------------------------------------------------------------------------------------------
# the original scenarios are unchanged


def test_original_scenarios_write_the_same_traces_and_truths() -> None:
    # fingerprints taken on the simulator before it learned the behaviours below: every
    # original scenario's trace, step and fixed steps, and every job's traces, to the byte
    baseline = json.loads(BASELINE.read_text())
    loops = {**SCENARIOS, **INTERMITTENT}
    assert set(baseline["loops"]) == set(loops)
    for name, (loop, _) in loops.items():
        run = simulate(loop)
        want = baseline["loops"][name]
        assert _digest(kineto_events(run)) == want["trace"], name
        assert [run.steady_step_ns, run.mean_steady_step_ns] == [want["step_ns"], want["mean_step_ns"]], name
        for fix in ORIGINAL_FIXES:
            assert [truth(loop, fix), mean_truth(loop, fix)] == want["fixed_step_ns"][fix], (name, fix)
    assert set(baseline["jobs"]) == set(JOBS)
    for name, spec in JOBS.items():
        jr = simulate_job(spec)
        assert _digest([kineto_events(r) for r in jr.runs]) == baseline["jobs"][name]["traces"], name
        assert jr.steady_step_ns == baseline["jobs"][name]["step_ns"], name


def test_new_fields_default_off() -> None:
    # a loop that asks for nothing new records one host thread and no new args
    run = simulate(SCENARIOS["mixed"][0])
    assert {h.thread for h in run.host} == {"main"}
    assert all(not h.record and h.flow is None for h in run.host)
    names = {e["args"]["name"] for e in kineto_events(run) if e.get("name") == "thread_name"}
    assert names == {"thread 1 (python3)"}


# --------------------------------------------------------------------------------------------
# the autograd device thread


def test_backward_runs_on_the_autograd_thread_while_the_main_thread_waits() -> None:
    loop = dataclasses.replace(_GPU_BOUND, backward_thread=True)
    run = simulate(loop)
    for k in range(1, loop.steps):
        main = _in_step(run, k, "main")
        device = _in_step(run, k, "autograd")
        wait = next(h for h in main if h.name == "## backward ##")
        seed = next(h for h in main if h.name == "aten::ones_like")
        nodes = [h for h in device if h.name.startswith("autograd::engine::evaluate_function: ")]
        # the main thread runs nothing of its own while the engine works
        assert not [h for h in main if wait.start < h.start < wait.end and h.end > seed.end + loop.python_ns]
        # the device thread starts a wake-up after the seed (and the Python after it), its
        # nodes follow each other with the engine's cost between them, and the main thread
        # resumes a wake-up after the last one
        gap = loop.autograd_node_ns - 2 * (loop.autograd_node_ns // 4)
        assert nodes[0].start == seed.end + loop.python_ns + THREAD_WAKE_NS
        assert all(b.start - a.end == gap for a, b in itertools.pairwise(nodes))
        assert wait.end == nodes[-1].end + gap + THREAD_WAKE_NS
        # so the backward's span is the seed, two wake-ups and the device thread's nodes
        span = (seed.end - seed.start) + loop.python_ns + 2 * THREAD_WAKE_NS + sum(n.end - n.start + gap for n in nodes)
        assert wait.end - wait.start == span
        # every launch inside the backward is on the device thread
        launches = [h for h in device if h.name == "cudaLaunchKernel"]
        assert len(launches) == loop.layers * (2 + 2 * loop.elementwise_per_layer)
        # nodes: a GEMM's, its weight's AccumulateGrad, two elementwise ones per layer
        kinds = Counter(n.name.split(": ")[1] for n in nodes)
        assert kinds == {"MmBackward0": loop.layers, "torch::autograd::AccumulateGrad": loop.layers,
                         "GeluBackward0": loop.layers * loop.elementwise_per_layer}


def test_autograd_thread_keeps_the_gpu_work_and_names_its_thread() -> None:
    loop = dataclasses.replace(_GPU_BOUND, backward_thread=True)
    one, two = simulate(_GPU_BOUND), simulate(loop)
    # the same kernels, plus the gradient seed's fill kernel each step
    durations = Counter(g.end - g.start for g in one.gpu)
    durations[2_000] += loop.steps
    assert Counter(g.end - g.start for g in two.gpu) == durations
    # GPU-bound: the step barely moves (the seed kernel and the thread hand-offs)
    assert two.steady_step_ns == pytest.approx(one.steady_step_ns, rel=0.01)
    events = kineto_events(two)
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names[AUTOGRAD_TID].endswith("(pt_autograd_0)")
    rows = [e for e in events if e.get("ph") == "X" and e.get("tid") == AUTOGRAD_TID]
    assert rows
    assert all(e["pid"] == PID for e in rows)


def test_forward_ops_flow_to_their_backward_nodes() -> None:
    run = simulate(dataclasses.replace(_GPU_BOUND, backward_thread=True))
    events = kineto_events(run)
    rows = {(e["tid"], e["ts"]): e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"}
    starts = {e["id"]: e for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    assert starts
    for fid, s in starts.items():
        f = ends[fid]
        assert s["tid"] == PID
        assert f["tid"] == AUTOGRAD_TID
        assert f["bp"] == "e"
        assert f["ts"] > s["ts"]
        fwd, node = rows[(s["tid"], s["ts"])], rows[(f["tid"], f["ts"])]
        assert fwd["name"] in ("aten::mm", "aten::gelu")
        assert node["name"] in ("MmBackward0", "GeluBackward0")
        assert fwd["args"]["Sequence number"] == node["args"]["Sequence number"]
        assert (fwd["args"]["Fwd thread id"], node["args"]["Fwd thread id"]) == (0, 1)


def test_backward_label_is_optional() -> None:
    run = simulate(dataclasses.replace(_GPU_BOUND, backward_thread=True, backward_label=None))
    assert not [h for h in run.host if h.name == "## backward ##"]
    assert [h for h in run.host if h.thread == "autograd"]


# --------------------------------------------------------------------------------------------
# CUDA graphs


def _region_host_ns(run: Run, k: int) -> int:
    """The host time of step ``k``'s captured region run eagerly: from the first forward
    layer's op to the end of the optimizer."""
    rows = _in_step(run, k, "main")
    first = next(h for h in rows if h.name == "aten::mm")
    opt = next(h for h in rows if h.name == "Optimizer.step#SGD.step")
    return opt.end - first.start


@pytest.mark.parametrize("backward_thread", [False, True])
def test_a_whole_step_graph_removes_the_regions_host_cost(backward_thread: bool) -> None:
    eager = dataclasses.replace(_HOST_BOUND, backward_thread=backward_thread)
    graphed = apply_fixes(eager, "cuda_graphs")
    e, g = simulate(eager), simulate(graphed)
    # the step's kernels but the gradient seed's (which runs only when loss.backward() is called)
    kernels = sorted(x.end - x.start for x in e.gpu if e.step_starts[2] <= x.start < e.step_starts[3] and x.cat == "kernel" and x.name != FILL)
    # the host's step shrinks by the region's eager cost (Python, dispatch, launches, the
    # autograd thread's work) and pays one replay instead
    replay = graphed.graph_launch_ns + GRAPH_CALL_NS + GRAPH_NODE_NS * len(kernels)
    assert _host_step_ns(e) - _host_step_ns(g) == _region_host_ns(e, 2) - replay
    # one cudaGraphLaunch a step, whose kernels keep their durations and carry its correlation
    launches = [h for h in _in_step(g, 2) if h.name == "cudaGraphLaunch"]
    assert len(launches) == 1
    assert not [h for h in _in_step(g, 2) if h.name == "cudaLaunchKernel"]
    mine = [x for x in g.gpu if x.correlation == launches[0].correlation]
    assert sorted(x.end - x.start for x in mine) == kernels
    # back to back, the device's own gap between them
    assert all(b.start - a.end == GRAPH_GAP_NS for a, b in itertools.pairwise(mine))
    assert not [h for h in g.host if h.thread == "autograd"]


def test_a_sync_cuts_the_graph() -> None:
    loop = dataclasses.replace(_HOST_BOUND, item_per_layer=True, cuda_graphs="step")
    run = simulate(loop)
    rows = _in_step(run, 2)
    # a graph before each .item() (each layer's forward), and one after the last for the rest
    assert len([h for h in rows if h.name == "cudaGraphLaunch"]) == loop.layers + 1
    assert len([h for h in rows if h.name == "aten::item"]) == loop.layers
    # without the syncs the whole step is one graph
    fixed = simulate(apply_fixes(loop, "host_device_sync"))
    assert len([h for h in _in_step(fixed, 2) if h.name == "cudaGraphLaunch"]) == 1


def test_compile_replays_forward_and_backward_graphs_on_their_threads() -> None:
    loop = apply_fixes(dataclasses.replace(_HOST_BOUND, backward_thread=True), "compile_reduce_overhead")
    run = simulate(loop)
    rows = _in_step(run, 2)
    launches = [h for h in rows if h.name == "cudaGraphLaunch"]
    assert [h.thread for h in launches] == ["main", "autograd"]
    forward = next(h for h in rows if h.name == "CompiledFunction")
    backward = next(h for h in rows if h.name == "CompiledFunctionBackward")
    assert forward.start <= launches[0].start
    assert launches[0].end <= forward.end
    assert forward.thread == "main"
    assert backward.start <= launches[1].start
    assert launches[1].end <= backward.end
    assert backward.thread == "autograd"
    # the optimizer stays eager on the main thread; the elementwise chains are fused
    assert len([h for h in rows if h.name == "aten::_fused_sgd_"]) == loop.optimizer_kernels
    fused = Counter(g.name for g in run.gpu if g.name.startswith("triton_"))
    assert fused == {"triton_poi_fused_gelu_0": loop.layers * loop.steps, "triton_poi_fused_gelu_backward_1": loop.layers * loop.steps}
    # on one thread, the backward graph replays on the main thread in its own range
    one = simulate(apply_fixes(_HOST_BOUND, "compile_reduce_overhead"))
    assert [h.thread for h in _in_step(one, 2) if h.name == "cudaGraphLaunch"] == ["main", "main"]
    assert [h.name for h in _in_step(one, 2) if h.name.startswith("Compiled")] == ["CompiledFunction", "CompiledFunctionBackward"]


def test_fused_chain_is_one_kernel_moving_the_bytes_once() -> None:
    loop = dataclasses.replace(_GPU_BOUND, elementwise_per_layer=3)
    fused = simulate(apply_fixes(loop, "fuse_elementwise"))
    kernels = [g for g in fused.gpu if g.name.startswith("triton_")]
    assert len(kernels) == 2 * loop.layers * loop.steps  # one per layer, forward and backward
    forward = {g.end - g.start for g in kernels if g.name.endswith("_0")}
    assert forward == {int(loop.elementwise_ns * (1 + 0.15 * 2))}
    assert truth(loop, "fuse_elementwise") < simulate(loop).steady_step_ns


# --------------------------------------------------------------------------------------------
# element-wise transfers


def test_an_elementwise_loop_costs_n_copies_and_syncs() -> None:
    # the GPU is idle when the reads start, so every read costs the same: t[i] (a view), then
    # .cpu(): a 4-byte copy, the sync behind it and the host's wake-up
    n = 64
    base = simulate(_HOST_BOUND)
    loop = dataclasses.replace(_HOST_BOUND, elementwise_reads=n)
    run = simulate(loop)
    per_read = 2 * (loop.dispatch_ns + loop.python_ns) + loop.launch_ns + LAUNCH_LATENCY_NS + 2_000 + WAKE_NS
    assert _host_step_ns(run) - _host_step_ns(base) == n * per_read
    rows = _in_step(run, 2)
    assert len([h for h in rows if h.name == "cudaStreamSynchronize"]) == n
    assert len([h for h in rows if h.name == "aten::select"]) == n
    assert len([s for s in run.syncs if s.start >= run.step_starts[2] and s.start < run.step_starts[3]]) == n
    copies = [g for g in run.gpu if g.name.startswith("Memcpy DtoH") and run.step_starts[2] <= g.start < run.step_starts[3]]
    assert len(copies) == n
    assert all(g.args["bytes"] == 4 for g in copies)
    # .item() instead of .cpu(): the same copies and syncs
    items = simulate(dataclasses.replace(loop, read_via="item"))
    assert len([h for h in _in_step(items, 2) if h.name == "aten::item"]) == n


def test_the_bulk_transfer_is_one_copy_and_a_host_loop() -> None:
    n = 4096
    loop = dataclasses.replace(_HOST_BOUND, elementwise_reads=n)
    fixed = apply_fixes(loop, "elementwise_transfer")
    run = simulate(fixed)
    rows = _in_step(run, 2)
    assert len([h for h in rows if h.name == "cudaStreamSynchronize"]) == 1
    copies = [g for g in run.gpu if g.name.startswith("Memcpy DtoH") and run.step_starts[2] <= g.start < run.step_starts[3]]
    assert [g.args["bytes"] for g in copies] == [4 * n]
    base = simulate(_HOST_BOUND)
    one_copy = loop.dispatch_ns + loop.python_ns + loop.launch_ns + LAUNCH_LATENCY_NS + max(2_000, int(4 * n / loop.pageable_bw)) + WAKE_NS
    assert _host_step_ns(run) - _host_step_ns(base) == one_copy + n * loop.host_read_ns
    assert truth(loop, "elementwise_transfer") < 0.2 * simulate(loop).steady_step_ns


def test_a_function_without_step_markers() -> None:
    loop, fixes = BEHAVIOURS["elementwise_reads"]
    run = simulate(loop)
    assert not [h for h in run.host if h.name.startswith("ProfilerStep") or "DataLoader" in h.name]
    assert len(run.step_starts) == loop.steps
    # the shape of the issue's function: 4,096 reads take it from about 25 ms to about 180
    assert 170e6 < run.steady_step_ns < 190e6
    assert 20e6 < truth(loop, fixes[0]) < 27e6


# --------------------------------------------------------------------------------------------
# the DataLoader: the pin-memory thread and the workers' hand-off


def test_the_pin_thread_pins_off_the_main_thread() -> None:
    loop = dataclasses.replace(_GPU_BOUND, pin_thread=True, batch_bytes=64 << 20)
    run = simulate(loop)
    pins = [h for h in run.host if h.name == "aten::pin_memory"]
    assert pins
    assert all(h.thread == "pin" for h in pins)
    assert all(h.end - h.start == int(loop.batch_bytes / loop.memory_bw) for h in pins)
    # one thread: its batches follow each other
    assert all(b.start >= a.end for a, b in itertools.pairwise(pins))
    # the main thread only takes the pinned batch from a queue: no pinning, no unpickling
    nexts = [h for h in run.host if "__next__" in h.name]
    assert all(h.thread == "main" for h in nexts)
    ready = [h for h in nexts[1:] if h.end - h.start == PIN_QUEUE_NS]
    assert len(ready) >= loop.steps - 2
    for h, pin in zip(nexts, pins, strict=False):
        assert h.end >= pin.end + PIN_QUEUE_NS
    # the pin thread has its own row in the trace
    events = kineto_events(run)
    assert {e["tid"] for e in events if e.get("name") == "aten::pin_memory"} == {PIN_TID}
    assert any(e.get("name") == "thread_name" and e["tid"] == PIN_TID for e in events)
    # without workers the main thread pins inside __next__, as before
    alone = simulate(dataclasses.replace(loop, num_workers=0))
    assert {h.thread for h in alone.host if h.name == "aten::pin_memory"} == {"main"}


def test_a_slow_pin_thread_sets_the_pace() -> None:
    # a batch the pin thread needs longer for than the GPU's step: the step is the pin thread's
    loop = dataclasses.replace(_GPU_BOUND, pin_thread=True, batch_bytes=1 << 30, load_ns=1_000, num_workers=8)
    pin_ns = loop.handoff_ns + int(loop.batch_bytes / loop.memory_bw)
    assert simulate(loop).steady_step_ns == pytest.approx(pin_ns, rel=0.01)
    assert simulate(dataclasses.replace(loop, pin_thread=False)).steady_step_ns < 0.5 * pin_ns


def test_the_handoff_is_a_fixed_cost_plus_one_per_byte() -> None:
    loop = dataclasses.replace(_GPU_BOUND, handoff_ns=RESNET50_HANDOFF_NS, handoff_ns_per_byte=RESNET50_HANDOFF_NS_PER_BYTE)
    run = simulate(loop)
    expected = RESNET50_HANDOFF_NS + int(RESNET50_HANDOFF_NS_PER_BYTE * loop.batch_bytes)
    nexts = [h.end - h.start for h in run.host if "__next__" in h.name][1:]
    assert statistics.median(nexts) == expected
    # a larger batch costs the main thread more
    big = simulate(dataclasses.replace(loop, batch_bytes=8 * loop.batch_bytes))
    assert statistics.median(h.end - h.start for h in big.host if "__next__" in h.name) > expected


@pytest.mark.shared
def test_handoff_defaults_match_the_real_resnet50_trace() -> None:
    # the num_workers=4 ResNet-50 trace: each steady __next__ rebuilds two tensors, the
    # 19.3 MB images and the 256-byte labels; the time before each rebuild (its aten::empty)
    # is that tensor's unpickling
    path = shared_trace("kineto/tb_plugin_pair/resnet50_profiler_api_num_workers_4/worker0.pt.trace.json.gz")
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    images, labels = 3 * 224 * 224 * 4 * 32, 256
    totals, per_byte = [], []
    for nxt in (e for e in events if e["name"].endswith("DataLoaderIter.__next__")):
        empties = sorted(e["ts"] for e in events if e["name"] == "aten::empty" and e["tid"] == nxt["tid"]
                         and nxt["ts"] < e["ts"] <= nxt["ts"] + nxt["dur"])
        if len(empties) != 3:  # one batch per __next__ (the first took two, one was already received)
            continue
        big, small = empties[1] - empties[0], empties[2] - empties[1]
        totals.append(nxt["dur"] * 1000)
        per_byte.append((big - small) * 1000 / (images - labels))
    assert len(totals) >= 3
    assert statistics.median(per_byte) == pytest.approx(RESNET50_HANDOFF_NS_PER_BYTE, rel=0.05)
    expected = RESNET50_HANDOFF_NS + RESNET50_HANDOFF_NS_PER_BYTE * (images + labels)
    assert statistics.median(totals) == pytest.approx(expected, rel=0.03)


# --------------------------------------------------------------------------------------------
# record_shapes


def test_record_shapes_writes_input_dims() -> None:
    loop = dataclasses.replace(_GPU_BOUND, record_shapes=True, gemm_mnk=(512, 256, 128))
    events = kineto_events(simulate(loop))
    mms = [e for e in events if e.get("name") == "aten::mm"]
    forward = [e["args"]["Input Dims"] for e in mms if e["args"]["Input Dims"] == [[512, 128], [128, 256]]]
    assert len(forward) == loop.layers * loop.steps
    assert all(e["args"]["Input type"] == ["float", "float"] for e in mms)
    amp = kineto_events(simulate(dataclasses.replace(loop, amp=True)))
    assert {tuple(e["args"]["Input type"]) for e in amp if e.get("name") == "aten::mm"} == {("c10::BFloat16", "c10::BFloat16")}
    # and off by default
    assert all("Input Dims" not in e.get("args", {}) for e in kineto_events(simulate(_GPU_BOUND)))


# --------------------------------------------------------------------------------------------
# several fixes at once


_ALL: dict[str, tuple[Loop, tuple[str, ...]]] = {**SCENARIOS, **INTERMITTENT, **BEHAVIOURS, **PLANS}
#: the scenarios of the behaviours added later
_NEW: dict[str, tuple[Loop, tuple[str, ...]]] = {**BEHAVIOURS, **PLANS}


@pytest.mark.parametrize("name", list(_ALL))
def test_fixes_compose_in_any_order(name: str) -> None:
    loop, fixes = _ALL[name]
    together = apply_fixes(loop, fixes)
    for order in itertools.permutations(fixes):
        edited = loop
        for fix in order:
            edited = FIXES[fix](edited)
        assert edited == together, order
    # and applying a fix twice changes nothing more (every edit but the old launch model's)
    for fix in fixes:
        if fix != "launch_bound":
            assert FIXES[fix](FIXES[fix](loop)) == FIXES[fix](loop), fix


def test_truth_of_several_fixes_is_the_loop_resimulated_with_all_of_them() -> None:
    loop, fixes = PLANS["pageable_loader_sync"]
    every = subset_truths(loop, fixes)
    assert len(every) == 2 ** len(fixes)
    assert every[()] == simulate(loop).steady_step_ns
    for fix in fixes:
        assert every[(fix,)] == truth(loop, fix) == truth(loop, [fix])
    both = tuple(k for k in FIXES if k in ("data_loading", "pageable_memcpy"))
    assert every[both] == simulate(FIXES["pageable_memcpy"](FIXES["data_loading"](loop))).steady_step_ns
    # pinning on the main thread costs more than the blocking copy it replaces; with workers
    # (the pin-memory thread) it pays: the fixes interact
    assert every[("pageable_memcpy",)] > every[()]
    assert every[both] < every[("data_loading",)]
    means = subset_truths(loop, fixes, mean=True)
    assert means[()] == simulate(loop).mean_steady_step_ns
    with pytest.raises(KeyError, match="unknown fix no_such_fix"):
        truth(loop, ["data_loading", "no_such_fix"])


def test_the_issue_data_bound_fp32_shape() -> None:
    # data loading alone takes the step from 61.6 to 48.5 ms, both fixes to 28.6 ms
    loop, _ = PLANS["data_fp32"]
    every = subset_truths(loop, ("data_loading", "no_tensor_cores"))
    assert every[()] / 1e6 == pytest.approx(61.6, abs=1.0)
    assert every[("data_loading",)] / 1e6 == pytest.approx(48.5, abs=1.0)
    assert every[("no_tensor_cores",)] == every[()]  # hidden behind the loader
    assert every[("data_loading", "no_tensor_cores")] / 1e6 == pytest.approx(28.6, abs=1.0)


@pytest.mark.parametrize("name", [n for n, (_, fixes) in PLANS.items() if not fixes])
def test_healthy_controls_have_nothing_to_fix(name: str) -> None:
    loop, _ = PLANS[name]
    step = simulate(loop).steady_step_ns
    for fix in FIXES:
        assert truth(loop, fix) > 0.95 * step, fix


@pytest.mark.parametrize("name", [n for n, (_, fixes) in _NEW.items() if fixes])
def test_every_new_scenarios_fix_saves_alone_or_with_the_others(name: str) -> None:
    loop, fixes = _NEW[name]
    every = subset_truths(loop, fixes)
    assert every[tuple(k for k in FIXES if k in fixes)] < 0.9 * every[()]


# --------------------------------------------------------------------------------------------
# the traces


@pytest.mark.parametrize("name", list(_NEW))
def test_new_scenarios_write_traces_tracekit_reads(name: str, tmp_path: Path) -> None:
    loop, _ = _NEW[name]
    run = simulate(loop)
    tables = tracekit.read_trace(write_kineto(run, tmp_path / f"{name}.json"), cache=False)
    rows = tables.events.height
    assert rows >= len(run.host) + len(run.gpu)


def test_loop_and_job_refuse_what_they_do_not_model() -> None:
    with pytest.raises(ValueError, match="cuda_graphs must be one of"):
        Loop("bad", cuda_graphs="always")
    with pytest.raises(ValueError, match="read_via"):
        Loop("bad", read_via="numpy")
    spec = JOBS["slow_gpu"]
    threaded = JobSpec("threaded", tuple(dataclasses.replace(loop, backward_thread=True) for loop in spec.loops))
    with pytest.raises(ValueError, match="backward_thread, which the job simulator does not model"):
        simulate_job(threaded)
