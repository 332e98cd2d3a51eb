"""The replay's prices of CUDA graphs and element-wise transfer loops, held to the simulator.

Every expected step time here is the simulated loop re-simulated with the fix applied
(tests/loopsim), never the analysis' own assumption; the bound is the one docs/critical-path.md
states for single fixes (3% of the re-simulated step).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from loopsim import BEHAVIOURS, PLANS, apply_fixes, simulate, truth, write_kineto

import tracekit
from tracekit.analysis import diagnose
from tracekit.analysis.causes import Edit, GraphCapture, fix_edit
from tracekit.analysis.causes.detectors import MIN_ELEMENT_READS, element_reads, scalar_reads, transfer_loops
from tracekit.analysis.replay import replay
from tracekit.analysis.steps import find_steps

TARGET = 0.03


def _tables(name: str, tmp_path: Path) -> tracekit.TraceTables:
    loop, _fixes = {**BEHAVIOURS, **PLANS}[name]
    return tracekit.read_trace(write_kineto(simulate(loop), tmp_path / f"{name}.json"), cache=False)


@pytest.mark.parametrize("name", ["graphs_launch_bound", "launch_sync"])
def test_cuda_graphs_price_the_whole_captured_region(name: str, tmp_path: Path) -> None:
    """The launch-bound fix replays the captured region's host work (main and autograd thread)
    as one graph replay per region between syncs: within 3% of the loop re-simulated under
    torch.cuda.graph (the first model, dividing only the launch calls, was 17-21% off)."""
    loop, _fixes = {**BEHAVIOURS, **PLANS}[name]
    t = _tables(name, tmp_path)
    edit = fix_edit("launch_bound")
    assert edit is not None
    assert edit.graphs is not None
    r = replay(t.events, t.links, find_steps(t.events, t.links).frame, [edit])
    predicted = r.predicted_step_ms("launch_bound")
    true_ms = truth(loop, "cuda_graphs") / 1e6
    assert predicted is not None
    assert abs(predicted - true_ms) / true_ms <= TARGET, (predicted, true_ms)


def test_element_reads_in_a_loop_are_the_top_finding(tmp_path: Path) -> None:
    """4,096 ``.cpu()`` reads of 4 bytes, each with its sync, in a function without step
    markers: the top finding is the element-wise transfer (naming the op, with a location for
    the Python line), priced within 3% of the function re-simulated with one transfer of the
    whole tensor (the whole trace is one step); no pinning advice for 4-byte copies."""
    loop, _fixes = BEHAVIOURS["elementwise_reads"]
    d = diagnose(_tables("elementwise_reads", tmp_path))
    top = d.findings[0]
    assert top.kind == "elementwise_transfer"
    assert top.evidence["op"] == "aten::to"
    assert top.evidence["element_reads"] == loop.steps * loop.elementwise_reads
    assert top.evidence["loops"] == loop.steps
    assert "location" in top.evidence
    assert "pageable_memcpy" not in {f.kind for f in d.findings}
    true_ms = sum(simulate(apply_fixes(loop, "elementwise_transfer")).step_ns) / 1e6
    assert top.predicted_step_ms is not None
    assert abs(top.predicted_step_ms - true_ms) / true_ms <= TARGET, (top.predicted_step_ms, true_ms)


def test_item_reads_in_a_training_loop_are_priced_as_one_transfer(tmp_path: Path) -> None:
    loop, _fixes = BEHAVIOURS["elementwise_items"]
    t = _tables("elementwise_items", tmp_path)
    loops = transfer_loops(t.events, t.links)
    # one loop per step: 512 reads and the step's loss.item() right after them
    assert loops.height == loop.steps
    assert loops["reads"].min() >= loop.elementwise_reads
    assert set(loops["op"]) == {"aten::item"}
    edit = fix_edit("elementwise_transfer")
    assert edit is not None
    r = replay(t.events, t.links, find_steps(t.events, t.links).frame, [edit])
    predicted, true_ms = r.predicted_step_ms("elementwise_transfer"), truth(loop, "elementwise_transfer") / 1e6
    assert predicted is not None
    assert abs(predicted - true_ms) / true_ms <= TARGET, (predicted, true_ms)


def test_a_few_reads_are_not_a_loop(tmp_path: Path) -> None:
    """A loss.item() per step is a sync, not an element-wise loop: no interval is marked."""
    loop, _fixes = PLANS["sync_loader"]
    t = tracekit.read_trace(write_kineto(simulate(loop), tmp_path / "sync_loader.json"), cache=False)
    assert transfer_loops(t.events, t.links).height == 0
    assert MIN_ELEMENT_READS > 1


def test_reads_split_into_loops_and_single_values(tmp_path: Path) -> None:
    """Every element read is either in a loop (the element-wise transfer's) or a single value
    read (the sync fix's: a ``loss.item()``): never both, never neither."""
    for name, loops_expected in (("launch_sync", False), ("elementwise_items", True)):
        t = _tables(name, tmp_path)
        singles, loops = scalar_reads(t.events, t.links), transfer_loops(t.events, t.links)
        reads = element_reads(t.events).height
        looped = int(loops["reads"].sum()) if loops.height else 0
        assert singles.height + looped == reads, name
        assert (loops.height > 0) == loops_expected, name


def test_graphs_and_the_sync_fix_together_are_the_resimulated_loop(tmp_path: Path) -> None:
    """``.item()`` after every layer cuts the captured regions; with the syncs gone too the
    calls no longer cut them (host work a fix removes ends no region) and each read goes
    whole, its 4-byte copy included: the two fixes together within 1% of the loop
    re-simulated under torch.cuda.graph without the reads (it was 4.7% with the regions still
    cut and the copies left on the GPU)."""
    loop, _fixes = PLANS["launch_sync"]
    t = _tables("launch_sync", tmp_path)
    graphs, sync = fix_edit("launch_bound"), fix_edit("host_device_sync")
    assert graphs is not None
    assert sync is not None
    both = Edit.all_of(graphs, sync)
    r = replay(t.events, t.links, find_steps(t.events, t.links).frame, [graphs, both])
    predicted = r.predicted_step_ms(both.label)
    true_ms = truth(loop, ["cuda_graphs", "host_device_sync"]) / 1e6
    assert predicted is not None
    assert abs(predicted - true_ms) / true_ms <= 0.01, (predicted, true_ms)


def test_edits_combine_field_by_field() -> None:
    graphs = GraphCapture(replay_ns=1, node_ns=2, kernel_gap_ns=3, host_ns=4)

    def rule_a(events, links):  # type: ignore[no-untyped-def]
        return events.head(1)

    def rule_b(events, links):  # type: ignore[no-untyped-def]
        return events.tail(1)

    a = Edit("a", host={"cpu": 0.5, "launch": 0.5}, gpu={"kernel": 0.5}, drop_sync=frozenset({"sync"}), launch_factor=0.5,
             graphs=graphs, collapse=rule_a)
    b = Edit("b", host={"cpu": 0.5, "data_loading": 0.0}, drop_sync=frozenset({"pageable_memcpy"}), pin=True, pin_min_bytes=64,
             launch_factor=0.5, collapse=rule_b)
    both = a.combined(b, "a+b")
    assert both.label == "a+b"
    assert dict(both.host) == {"cpu": 0.25, "launch": 0.5, "data_loading": 0.0}
    assert dict(both.gpu) == {"kernel": 0.5}
    assert both.drop_sync == frozenset({"sync", "pageable_memcpy"})
    assert both.pin
    assert both.pin_min_bytes == 64
    assert both.launch_factor == 0.25
    assert both.graphs == graphs
    # the union of both rules' intervals, in the interval columns (a rule's extra columns dropped)
    frame = pl.DataFrame({"pid": [1, 1, 2], "tid": [5, 5, 6], "start_ns": [0, 10, 20], "end_ns": [5, 15, 25], "reads": [9, 9, 9]})
    assert both.collapse is not None
    assert both.collapse(frame, frame).rows() == [(1, 5, 0, 5), (2, 6, 20, 25)]
    assert a.combined(Edit()).collapse is rule_a


def test_pinning_on_the_main_thread_is_priced_before_the_copy_it_feeds(tmp_path: Path) -> None:
    """num_workers=0, a 256 MB pageable batch and an ``.item()`` at the end of each step: with
    ``pin_memory=True`` the main thread copies the batch into pinned memory before it launches
    the (now asynchronous) copy, and the GPU, idle at the step's start, waits for both, so the
    re-simulated step is slower.  The replay says so (it once added the host copy after the
    launch, where the GPU copy overlapped it: 'no change', 11.6% off), and no finding
    recommends the fix."""
    name = "pageable_loader_sync"
    loop, _fixes = {**BEHAVIOURS, **PLANS}[name]
    t = _tables(name, tmp_path)
    r = replay(t.events, t.links, find_steps(t.events, t.links).frame, [fix_edit("pageable_memcpy")])  # type: ignore[list-item]
    predicted, measured = r.predicted_step_ms("pageable_memcpy"), r.measured_step_ms
    true_ms = truth(loop, "pageable_memcpy") / 1e6
    assert predicted is not None
    assert measured is not None
    assert true_ms > measured
    assert predicted > measured
    # within the bound of the analysis' stated bandwidths (24 GB/s pinned, 10 GB/s host copy;
    # the simulator's loop runs at 22 and 9)
    assert abs(predicted - true_ms) / true_ms <= 0.04, (predicted, true_ms)
    assert "pageable_memcpy" not in {f.kind for f in diagnose(t).findings}
