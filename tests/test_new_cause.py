"""Adding a cause takes its registry entry and its detector, nothing else.

This module declares ``my_checkpoint`` — host time inside ``my_checkpoint`` ranges (a training
loop that saves a checkpoint on its own thread every step) — with the replay edit of its
fix, registers it for the module's tests, and analyses a loop simulated with such ranges
(tests/loopsim).  The cause must reach the breakdown, a finding priced by the replay, the
critical path, a ``--what-if`` knob and every renderer, with no edit anywhere else.

Truth is the simulator's: the checkpoint's cost is the GPU idle time the simulated ranges
overlap, and its fix's worth is the loop re-simulated without them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import loopsim
import polars as pl
import pytest
from loopsim import Loop, Run, write_kineto
from loopsim.kineto import kineto_events
from loopsim.sim import HostEv

import tracekit
from tracekit.analysis import causes, diagnose
from tracekit.analysis.causes import ON_LIGHT, Cause, Edit, FindingKind, Fix, HostEvents, PathCause
from tracekit.report import formatting

#: the training loop: GPU-bound steps ending in loss.item(), and a checkpoint on the main thread
#: before the next batch
LOOP = Loop("checkpoint", steps=10, num_workers=4, load_ns=5_000_000, pinned=True, non_blocking=True, layers=8,
            gemm_ns=1_500_000, step_sync="item")
CHECKPOINT_NS = 15_000_000
FIX_TEXT = "checkpoints are written by a background thread (the training loop hands them over)"


def checkpoint_ranges(h: HostEvents) -> pl.DataFrame:
    """The detector: the training thread's ``my_checkpoint`` ranges."""
    return h.host.filter(pl.col("name") == "my_checkpoint")


CHECKPOINT = Cause(
    "my_checkpoint", "checkpointing", "checkpoint", "#17becf", "#8fbcbb", ON_LIGHT,
    "`my_checkpoint` ranges (a checkpoint saved on the training thread)",
    detector=checkpoint_ranges, host_tag="my_checkpoint", without_gpu=True,
    path=PathCause("checkpointing", "checkpointing", "my_checkpoint", "rail_load", "host time in `my_checkpoint` ranges",
                   ("my_checkpoint",)),
    finding=FindingKind(
        "", "Saving checkpoints stalls the training loop",
        "Save checkpoints asynchronously (torch.distributed.checkpoint.async_save, or a background thread writing "
        "a copy of the state dict), or less often.",
        "the GPU waits while the training thread writes a checkpoint",
        replay=Fix(Edit(host={"my_checkpoint": 0.0}), FIX_TEXT),
    ),
)


def simulate(checkpoint_ns: int) -> Run:
    """The loop saving a checkpoint on the training thread before every step's batch: the
    simulator's host pause (``gc_every``/``gc_ns``: host time no operator covers, right at the
    step's start), recorded the way the program marks it, as a ``my_checkpoint`` range."""
    run = loopsim.simulate(dataclasses.replace(LOOP, gc_every=1, gc_ns=checkpoint_ns))
    if checkpoint_ns:
        run.host.extend(HostEv("user_annotation", "my_checkpoint", s, s + checkpoint_ns) for s in run.step_starts)
    return run


def _idle_in_checkpoints(run: Run) -> float:
    """ms per steady step the simulated GPU sat idle inside checkpoint ranges."""
    busy = sorted((g.start, g.end) for g in run.gpu)
    idle = 0
    for h in run.host:
        if h.name != "my_checkpoint" or h.start < run.step_starts[1]:
            continue
        covered = sum(max(0, min(e, h.end) - max(s, h.start)) for s, e in busy)
        idle += (h.end - h.start) - covered
    return idle / (LOOP.steps - 1) / 1e6


@pytest.fixture(scope="module")
def registered() -> Iterator[Cause]:
    with causes.registered(CHECKPOINT, before="launch_bound") as cause:
        yield cause


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_kineto(simulate(CHECKPOINT_NS), tmp_path_factory.mktemp("ckpt") / "checkpoint.kineto.json")


@pytest.fixture(scope="module")
def analysed(registered: Cause, trace_path: Path) -> tuple[tracekit.TraceTables, Any]:
    tables = tracekit.read_trace(trace_path, cache=False)
    return tables, diagnose(tables)


def test_the_simulated_checkpoint_costs_what_the_loop_loses() -> None:
    # the truth the analysis is held to: the checkpoint leaves the GPU idle, and the loop
    # without it is faster by about as much
    slow, fast = simulate(CHECKPOINT_NS), simulate(0)
    assert _idle_in_checkpoints(slow) == pytest.approx(CHECKPOINT_NS / 1e6, rel=0.02)
    assert (slow.steady_step_ns - fast.steady_step_ns) / 1e6 == pytest.approx(CHECKPOINT_NS / 1e6, rel=0.05)


def test_the_registry_knows_the_cause(registered: Cause) -> None:
    assert list(causes.CAUSES).index("my_checkpoint") == list(causes.CAUSES).index("launch_bound") - 1
    assert "my_checkpoint" in causes.IDLE_CAUSES
    assert causes.WHAT_IF_CAUSES["my_checkpoint"] == frozenset({"my_checkpoint"}), "a knob of its own, by default"
    assert causes.EDGE_TAGS["my_checkpoint"] == "checkpointing"
    assert causes.FIX_MODELS["my_checkpoint"] == FIX_TEXT
    assert causes.FINDING_WHAT_IF["my_checkpoint"] == {"my_checkpoint": 0.0}, "priced as that cause at 0, by default"
    for table in (causes.idle_causes_markdown(), causes.breakdown_markdown(), causes.knobs_markdown(),
                  causes.finding_kinds_markdown(), causes.finding_what_if_markdown()):
        assert "my_checkpoint" in table
    assert "| `checkpointing` |" in causes.path_causes_markdown()


def test_breakdown_finding_and_replay_price(analysed: tuple[tracekit.TraceTables, Any]) -> None:
    _tables, d = analysed
    slow, fast = simulate(CHECKPOINT_NS), simulate(0)
    assert list(d.breakdown) == list(causes.CAUSES)
    assert d.breakdown_ms["my_checkpoint"] == pytest.approx(_idle_in_checkpoints(slow), rel=0.05)
    assert "my_checkpoint" in d.timeline.gaps["cause"].to_list()
    f = next(f for f in d.findings if f.kind == "my_checkpoint")
    assert f.title == CHECKPOINT.finding.title  # type: ignore[union-attr]
    assert f.modelled_fix == FIX_TEXT, "priced by the replay of its declared edit"
    assert f.predicted_step_ms == pytest.approx(fast.steady_step_ns / 1e6, rel=0.05)
    assert f.ms_per_step == pytest.approx((slow.steady_step_ns - fast.steady_step_ns) / 1e6, rel=0.10)


def test_critical_path_and_what_if(registered: Cause, trace_path: Path) -> None:
    d = diagnose(tracekit.read_trace(trace_path, cache=False), what_if=[{"my_checkpoint": 0.0}])
    assert d.critical_path is not None
    path = d.critical_path.breakdown_per_step()
    assert path["checkpointing"] == pytest.approx(CHECKPOINT_NS / 1e6, rel=0.05)
    assert set(d.critical_path.segments["cause"].cast(pl.String).unique()) >= {"checkpointing"}
    (answer,) = d.what_ifs
    fast = simulate(0)
    assert answer.predicted_step_ms == pytest.approx(fast.steady_step_ns / 1e6, rel=0.05)


def _cli(*args: str) -> str:
    from click.testing import CliRunner

    from tracekit.cli.app import cli

    result = CliRunner().invoke(cli, list(args), terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_every_report_shows_it(registered: Cause, trace_path: Path, fmt: str) -> None:
    title = CHECKPOINT.finding.title  # type: ignore[union-attr]
    out = _cli("analyze", str(trace_path), "-f", fmt, "-q", "--no-cache")
    if fmt == "json":
        data = json.loads(out)
        assert "my_checkpoint" in data["summary"]["breakdown"]
        assert any(f["kind"] == "my_checkpoint" and f["modelled_fix"] == FIX_TEXT for f in data["findings"])
        assert "checkpointing" in data["critical_path"]["breakdown_ms_per_step"]
        return
    assert title in out
    assert FIX_TEXT in out
    if fmt == "text":
        assert "checkpointing" in out.split("What decides the step time")[0], "the breakdown lists it"
    if fmt == "markdown":
        assert "| checkpointing |" in out
    if fmt == "html":
        assert CHECKPOINT.color in out, "drawn in its colour (breakdown bar, timeline, finding)"


def test_the_command_line_knows_its_knob(registered: Cause) -> None:
    assert "my_checkpoint" in " ".join(_cli("analyze", "--help").split())


def test_the_annotated_trace_shows_it(registered: Cause, trace_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "annotated.json"
    _cli("annotate", str(trace_path), "-o", str(out))
    doc = json.loads(out.read_text())
    path = [e for e in doc["traceEvents"] if e.get("cname") == "rail_load"]
    assert path, "critical-path stretches of the new category, in its Chrome colour"
    assert any("checkpointing" in json.dumps(e) for e in path)
    assert any("Saving checkpoints" in json.dumps(e) for e in doc["traceEvents"]), "the finding's lane"
    assert formatting.cause_label("my_checkpoint") == "checkpointing"


def test_the_tui_overview_shows_it(registered: Cause, trace_path: Path) -> None:
    pytest.importorskip("textual")
    from test_tui import drive, text_of

    from tracekit.tui import make_app
    from tracekit.tui.styles import cause_css

    assert "BreakdownChart > .breakdown--my_checkpoint {" in cause_css()
    app = make_app(trace_path, cache=False)
    seen: dict[str, str] = {}

    async def scenario(pilot: Any) -> None:
        seen["breakdown"] = text_of(app, "#breakdown")

    drive(app, scenario)
    assert "checkpointing" in seen["breakdown"]


def test_a_cpu_only_trace_counts_it_on_the_training_thread(registered: Cause, tmp_path: Path) -> None:
    # the same loop's host events only (a capture without a GPU): the training thread's step is
    # split into data loading, the checkpoint (declared ``without_gpu``) and the rest
    run = simulate(CHECKPOINT_NS)
    doc = {"schemaVersion": 1, "traceEvents": [e for e in kineto_events(run) if e.get("cat") in ("cpu_op", "user_annotation")]}
    path = tmp_path / "host_only.json"
    path.write_text(json.dumps(doc))
    d = diagnose(tracekit.read_trace(path, cache=False))
    assert d.gpu_utilization is None

    def share(name: str) -> float:
        # the simulated host time in such ranges, as a share of the simulated steps
        inside = sum(h.end - h.start for h in run.host if name in h.name)
        return inside / sum(h.end - h.start for h in run.host if h.name.startswith("ProfilerStep#"))

    assert d.complete_steps == LOOP.steps
    assert d.breakdown["my_checkpoint"] == pytest.approx(share("my_checkpoint"), rel=0.01)
    assert d.breakdown["data_loading"] == pytest.approx(share("DataLoader"), rel=0.01)
    assert sum(d.breakdown.values()) == pytest.approx(1.0)
    assert "my_checkpoint" in [f.kind for f in d.findings]
