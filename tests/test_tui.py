"""The terminal UI: behaviour driven with Textual's Pilot, appearance with SVG snapshots.

Behaviour tests press keys and assert on the screens, widgets and messages; snapshot tests
(pytest-textual-snapshot, ``tests/__snapshots__/test_tui/``) draw each screen at a fixed
terminal size from a synthetic trace.  Regenerate the pictures with
``pytest tests/test_tui.py --snapshot-update`` after a deliberate change, and look at them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gzip
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from conftest import REPO, SAMPLE_TRACES, jobs_folder, shared_trace

from tracekit.cli import main
from tracekit.errors import UsageError
from tracekit.tui import make_app
from tracekit.tui.app import TracekitApp
from tracekit.tui.bindings import GLOBAL, GROUPS, TIMELINE
from tracekit.tui.loader import InputKind, Session, detect_input, load_session
from tracekit.tui.messages import LoadProgress, OpenTimeline
from tracekit.tui.model import Focus
from tracekit.tui.screens.finding import FindingScreen
from tracekit.tui.screens.help import HelpScreen, help_table
from tracekit.tui.screens.loading import ErrorScreen
from tracekit.tui.screens.overview import OverviewScreen
from tracekit.tui.screens.tables import TablesScreen
from tracekit.tui.screens.timeline import StepPicker, TimelineScreen
from tracekit.tui.widgets.frame_table import Column, FrameTable
from tracekit.tui.widgets.timeline import TimelineView

SYNTH = SAMPLE_TRACES / "synthetic"
HOST_SYNC = SYNTH / "host_sync.kineto.json"
SIZE = (120, 36)

Scenario = Callable[[Any], Awaitable[None]]


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def host_sync_session() -> Session:
    """The host_sync scenario, loaded once; its source is a bare name so pictures do not depend on paths."""
    session = load_session(HOST_SYNC, cache=False)
    return dataclasses.replace(session, source="host_sync.kineto.json")


async def settle(app: TracekitApp, pilot: Any) -> None:
    """Wait for the loading worker (successful or not) and the screens it installs."""
    from textual.worker import WorkerFailed

    with contextlib.suppress(WorkerFailed):  # a failed load is what some tests are about
        await app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


def drive(app: TracekitApp, scenario: Scenario, *, size: tuple[int, int] = SIZE, hook: Callable[[Any], None] | None = None) -> None:
    async def run() -> None:
        async with app.run_test(size=size, message_hook=hook) as pilot:
            await settle(app, pilot)
            await scenario(pilot)

    asyncio.run(run())


def timeline_of(app: TracekitApp) -> TimelineView:
    return app.screen.query_one(TimelineView)


def text_of(app: TracekitApp, selector: str) -> str:
    widget = app.screen.query_one(selector)
    return str(widget.render())


# ---------------------------------------------------------------- architecture


CORE_MODULES = [
    "tracekit", "tracekit.reading.trace", "tracekit.analysis", "tracekit.analysis.view", "tracekit.report", "tracekit.reading.job",
    "tracekit.pipeline", "tracekit.tui.loader", "tracekit.tui.model", "tracekit.tui.session",
]


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_and_loader_import_without_textual(module: str) -> None:
    """The TUI depends on the core, never the reverse; its loader and model are plain Python too."""
    code = (
        f"import importlib, sys; importlib.import_module({module!r}); "
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'textual')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert proc.stdout.strip() == "", f"{module} imported {proc.stdout.strip()}"


def test_bindings_are_data_listed_by_help_and_palette(host_sync_session: Session) -> None:
    table = help_table()
    keys_column = [str(c) for c in table.columns[1]._cells]
    for _title, specs in GROUPS:
        for spec in specs:
            assert spec.description in keys_column

    app = make_app(session=host_sync_session)

    async def scenario(pilot: Any) -> None:
        await pilot.press("2")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for spec in GLOBAL:
            if spec.action not in ("app.quit", "app.show_batch"):
                assert spec.description in titles
        for spec in TIMELINE:
            assert spec.description in titles
        assert "Batch traces" not in titles  # only for batch outputs

    drive(app, scenario)


# ------------------------------------------------------------------- loading


def test_input_kinds_are_detected(tmp_path: Path) -> None:
    assert detect_input(HOST_SYNC) is InputKind.TRACE
    (tmp_path / "traces.parquet").write_bytes(b"")
    assert detect_input(tmp_path) is InputKind.BATCH
    capture = tmp_path / "capture"
    capture.mkdir()
    (capture / "metadata.json").write_text("{}")
    assert detect_input(capture) is InputKind.CAPTURE
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Exception, match="neither a capture folder"):
        detect_input(empty)


def test_trace_loads_in_a_worker_with_progress_then_shows_the_overview() -> None:
    app = make_app(HOST_SYNC, cache=False)
    seen: list[Any] = []

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, OverviewScreen)
        summary = text_of(app, "#summary")
        assert "host_sync.kineto.json" in summary
        assert "GPU utilization 80.0%" in summary
        findings = app.screen.query_one("#findings", FrameTable)
        assert findings.row_count == 1
        assert findings.current_row()["kind"] == "host_device_sync"  # type: ignore[index]

    drive(app, scenario, hook=seen.append)
    progress = [m for m in seen if isinstance(m, LoadProgress)]
    assert progress
    assert progress[-1].fraction == 1.0


def test_a_bad_file_shows_the_error_instead_of_crashing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    app = make_app(bad, cache=False)

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, ErrorScreen)
        assert str(bad) in app.screen.message
        assert "Traceback" not in app.screen.message
        await pilot.press("2", "3", "r")  # nothing to show: keys are ignored, not fatal
        assert isinstance(app.screen, ErrorScreen)
        await pilot.press("q")

    drive(app, scenario)
    assert app.return_code == 3


def test_a_bug_while_loading_is_reported_on_screen(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: Any, **_k: Any) -> Session:
        raise RuntimeError("kaboom")

    monkeypatch.setattr("tracekit.tui.app.load_session", boom)
    app = make_app(HOST_SYNC, cache=False)

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, ErrorScreen)
        assert "internal error" in app.screen.message
        assert "RuntimeError: kaboom" in app.screen.message

    drive(app, scenario)


def test_cli_reports_missing_input_without_starting_the_ui(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["tui", str(tmp_path / "nope.json")]) == 3
    err = capsys.readouterr().err
    assert "nope.json" in err
    assert "Traceback" not in err


# ------------------------------------------------------------------ navigation


def test_keys_move_between_screens(host_sync_session: Session) -> None:
    app = make_app(session=host_sync_session)

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, OverviewScreen)
        await pilot.press("2")
        assert isinstance(app.screen, TimelineScreen)
        await pilot.press("3")
        assert isinstance(app.screen, TablesScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, TablesScreen)
        await pilot.press("1")
        assert isinstance(app.screen, OverviewScreen)
        await pilot.press("enter")
        assert isinstance(app.screen, FindingScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)

    drive(app, scenario)


def test_the_overview_opens_with_the_answer_and_the_fix_plan(host_sync_session: Session) -> None:
    app = make_app(session=host_sync_session)

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, OverviewScreen)
        d = host_sync_session.traces[0].diagnosis
        shown = text_of(app, "#plan")
        sentence = d.plan.sentence()
        assert sentence is not None
        assert shown.startswith(sentence)
        assert d.plan.steps
        assert "Fix plan" in shown
        assert d.plan.steps[0].kind in shown

    drive(app, scenario)


def test_finding_detail_then_timeline_at_its_first_occurrence(host_sync_session: Session) -> None:
    app = make_app(session=host_sync_session)
    d = host_sync_session.traces[0].diagnosis
    first = d.timeline.gaps.filter(pl.col("host_device_sync_ns") > 0).sort("start_ns").row(0, named=True)

    async def scenario(pilot: Any) -> None:
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, FindingScreen)
        assert "Host-device synchronisation" in text_of(app, "#finding-head")
        assert ".item()" in text_of(app, "#finding-fix")
        assert "cudaStreamSynchronize" in text_of(app, "#finding-evidence")
        gaps = screen.query_one("#finding-gaps", FrameTable)
        assert gaps.row_count == 8  # one sync gap per step
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, TimelineScreen)
        assert app.screen.focus_spec is not None
        assert app.screen.focus_spec.step == first["step"]
        sel = timeline_of(app).selected()
        assert sel is not None
        lane, entry = sel
        assert lane.kind == "idle"
        assert lane.ids[entry] == first["gap_id"]

    drive(app, scenario)


def test_tables_sort_and_filter(host_sync_session: Session) -> None:
    app = make_app(session=host_sync_session)

    async def scenario(pilot: Any) -> None:
        await pilot.press("3")
        screen = app.screen
        assert isinstance(screen, TablesScreen)
        table = screen.active_table()
        assert table.id == "table-gaps"
        assert table.row_count == 16
        await pilot.press(*["right"] * 5, "s")  # the idle (ms) column, largest first
        assert table.sort_key == "dur_ms"
        assert table.sort_descending
        durations = table.view["dur_ms"].to_list()
        assert durations == sorted(durations, reverse=True)
        await pilot.press("s")
        assert table.view["dur_ms"].to_list() == sorted(durations)
        await pilot.press("slash", *"sync")
        assert table.row_count == 8
        assert set(table.view["cause"].to_list()) == {"host_device_sync"}
        assert "8 of 16 rows" in text_of(app, "#table-status")
        await pilot.press("escape")
        assert table.row_count == 16
        await pilot.press("right_square_bracket")
        assert screen.active_table().id == "table-syncs"
        await pilot.press("right_square_bracket", "slash", *"xmma", "enter")
        kernels = screen.active_table()
        assert kernels.id == "table-kernels"
        assert kernels.row_count == 2

    drive(app, scenario)


def test_enter_on_a_gap_opens_the_timeline_at_that_gap(host_sync_session: Session) -> None:
    app = make_app(session=host_sync_session)
    gaps = host_sync_session.traces[0].diagnosis.timeline.gaps
    third_sync = gaps.filter(pl.col("cause") == "host_device_sync").sort("start_ns").row(2, named=True)

    async def scenario(pilot: Any) -> None:
        await pilot.press("3", "slash", *"sync", "enter", "down", "down")
        table = app.screen.query_one("#table-gaps", FrameTable)
        assert table.current_row()["gap_id"] == third_sync["gap_id"]  # type: ignore[index]
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TimelineScreen)
        timeline = timeline_of(app)
        sel = timeline.selected()
        assert sel is not None
        lane, entry = sel
        assert lane.kind == "idle"
        assert lane.ids[entry] == third_sync["gap_id"]
        assert app.screen.focus_spec is not None
        assert app.screen.focus_spec.step == third_sync["step"]
        w0, w1 = timeline.window
        start, end = third_sync["start_ns"] - timeline.origin, third_sync["end_ns"] - timeline.origin
        assert w0 <= start
        assert end <= w1
        assert (w1 - w0) < 4 * (end - start)
        assert "host-device sync" in str(app.screen.query_one("#timeline-detail").render())

    drive(app, scenario)


def test_timeline_zoom_pan_select_and_follow(host_sync_session: Session) -> None:
    app = make_app(session=host_sync_session)
    tables = host_sync_session.traces[0].tables

    async def scenario(pilot: Any) -> None:
        await pilot.press("2")
        timeline = timeline_of(app)
        w0, w1 = timeline.window
        await pilot.press("plus")
        assert timeline.window[1] - timeline.window[0] == pytest.approx((w1 - w0) / 2)
        await pilot.press("minus")
        assert timeline.window[1] - timeline.window[0] == pytest.approx(w1 - w0)
        await pilot.press("plus", "plus")
        before = timeline.window
        await pilot.press("l")
        assert timeline.window[0] > before[0]
        await pilot.press("h")
        assert timeline.window[0] == pytest.approx(before[0])
        await pilot.press("0")
        # first event: the step annotation; one lane down, the operators; two down, the launch calls
        await pilot.press("down", "down")
        sel = timeline.selected()
        assert sel is not None
        assert sel[0].depth == 2
        launches = tables.events.filter(pl.col("name") == "cudaLaunchKernel").sort("start_ns")["event_id"].to_list()
        assert timeline.select_id("track", launches[0])
        await pilot.press("right")
        lane, entry = timeline.selected()  # type: ignore[misc]
        launch_id = lane.ids[entry]
        assert launch_id == launches[1]
        await pilot.press("f")
        lane, entry = timeline.selected()  # type: ignore[misc]
        kernel = tables.events.filter(pl.col("event_id") == lane.ids[entry]).row(0, named=True)
        assert kernel["kind"] == "kernel"
        assert tables.links.filter((pl.col("launch_event_id") == launch_id) & (pl.col("gpu_event_id") == kernel["event_id"])).height == 1
        assert "launched by: cudaLaunchKernel" in str(app.screen.query_one("#timeline-detail").render())
        await pilot.press("n")
        lane, entry = timeline.selected()  # type: ignore[misc]
        assert lane.kind == "idle"
        await pilot.press("d")
        assert timeline.depth_limit == 6

    drive(app, scenario)


def test_mouse_sorts_tables_and_selects_on_the_timeline(host_sync_session: Session) -> None:
    app = make_app(session=host_sync_session)

    async def scenario(pilot: Any) -> None:
        await pilot.press("3")
        table = app.screen.query_one("#table-gaps", FrameTable)
        x = sum(c.width + 1 for c in table.columns[:5]) + 2  # inside the "idle (ms)" header
        await pilot.click("#table-gaps", offset=(x, 0))
        assert table.sort_key == "dur_ms"
        await pilot.press("2")
        timeline = timeline_of(app)
        from tracekit.tui.widgets.timeline import LABEL_WIDTH

        stream = next(i for i, lane in enumerate(timeline.lanes) if lane.track and lane.track.startswith("gpu"))
        await pilot.click("#timeline", offset=(LABEL_WIDTH + 2, 1 + stream - timeline.top))
        lane, _entry = timeline.selected()  # type: ignore[misc]
        assert lane.track is not None
        assert lane.track.startswith("gpu")
        assert "kernel" in str(app.screen.query_one("#timeline-detail").render())

    drive(app, scenario)


def test_step_selectors(host_sync_session: Session) -> None:
    app = make_app(session=host_sync_session)

    async def scenario(pilot: Any) -> None:
        await pilot.press("2")
        screen = app.screen
        assert isinstance(screen, TimelineScreen)
        assert screen.focus_spec is not None
        start = screen.focus_spec.step
        await pilot.press("full_stop", "full_stop")
        assert screen.focus_spec.step == start + 2
        await pilot.press("comma")
        assert screen.focus_spec.step == start + 1
        await pilot.press("s")
        assert isinstance(app.screen, StepPicker)
        await pilot.press(*"0:6", "enter")
        assert app.screen is screen
        assert screen.focus_spec.step == 6
        await pilot.press("s", *"99", "enter")
        assert screen.focus_spec.step == 6  # no step 99: unchanged, with a notification
        assert timeline_of(app).view is not None
        assert timeline_of(app).view.step == 6

    drive(app, scenario)


def test_big_traces_build_step_views_in_a_worker(host_sync_session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ASYNC_EVENTS a step view is built in a thread; a step seen before comes from the cache at once."""
    monkeypatch.setattr("tracekit.tui.screens.timeline.ASYNC_EVENTS", 0)
    app = make_app(session=host_sync_session)

    async def scenario(pilot: Any) -> None:
        await pilot.press("2")
        await settle(app, pilot)
        timeline = timeline_of(app)
        assert timeline.view is not None
        assert timeline.lanes
        first = timeline.view.step
        await pilot.press("full_stop")
        await settle(app, pilot)
        assert timeline.view.step == first + 1
        assert f"step {first + 1}" in text_of(app, "#timeline-title")
        screen = app.screen
        assert isinstance(screen, TimelineScreen)
        assert len(screen._views) == 2
        await pilot.press("comma")
        assert timeline.view.step == first  # from the cache

    drive(app, scenario)


def test_critical_path_is_highlighted_when_the_diagnosis_has_one(host_sync_session: Session) -> None:
    trace = host_sync_session.traces[0]
    d = trace.diagnosis
    step = d.steps.row(0, named=True)
    kernels = trace.tables.events.filter((pl.col("kind") == "kernel") & (pl.col("start_ns") < step["end_ns"])).head(3)
    segments = kernels.select(
        "rank", pl.lit(step["step"]).alias("step"), pl.int_range(pl.len()).alias("seq"), "start_ns", "end_ns", "dur_ns",
        pl.format("gpu {}/{}", "device", "stream").alias("track"), "event_id", pl.lit("span").alias("edge_kind"),
        pl.lit("compute").alias("cause"), pl.lit(False).alias("inferred"),
    ).with_columns(pl.col("rank").cast(pl.Int32))
    with_path = dataclasses.replace(d)
    object.__setattr__(with_path, "critical_path", SimpleNamespace(segments=segments))
    result = dataclasses.replace(trace.result, diagnosis=with_path)
    session = dataclasses.replace(host_sync_session, traces=(dataclasses.replace(trace, result=result),))
    app = make_app(session=session)

    async def scenario(pilot: Any) -> None:
        app.show_focus(Focus(0, int(step["rank"]), int(step["step"])))
        await pilot.pause()
        timeline = timeline_of(app)
        assert timeline.lanes[0].kind == "path"
        assert len(timeline.lanes[0].starts) == 3
        assert timeline._critical_ids == set(segments["event_id"].to_list())
        assert "no critical path" not in str(app.screen.query_one("#timeline-title").render())
        await pilot.press("c")
        assert timeline.lanes[0].kind != "path"

    drive(app, scenario)


def test_frame_table_formats_only_the_rows_on_screen() -> None:
    n = 1_000_000
    frame = pl.select(i=pl.int_range(n)).with_columns(name=pl.format("row {}", "i"))
    table = FrameTable(frame, [Column("i", "i", 8, str, "right"), Column("name", "name", 12)], id="big")

    from textual.app import App, ComposeResult

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield table

    async def run() -> None:
        async with Host().run_test(size=(40, 12)) as pilot:
            table.focus()
            await pilot.pause()
            assert sum(len(p) for p in table._pages.values()) <= 64  # one page formatted, not a million rows
            await pilot.press("end")
            await pilot.pause()
            assert table.current_row() == {"i": n - 1, "name": f"row {n - 1}"}
            assert sum(len(p) for p in table._pages.values()) <= 128
            table.filter("row 99999")
            assert table.row_count == 11  # 99999 and 999990..999999
            table.sort_by("i", descending=True)
            assert table.view["i"][0] == 999999

    asyncio.run(run())


# ----------------------------------------------------------- every kind of input


def test_nsight_export_opens() -> None:
    app = make_app(SYNTH / "dataloader_stall.nsys.sqlite", cache=False)

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, OverviewScreen)
        assert "nsys" in text_of(app, "#summary")
        await pilot.press("2")
        assert timeline_of(app).lanes

    drive(app, scenario)


def _capture_folder(root: Path) -> Path:
    folder = root / "capture"
    folder.mkdir()
    for rank in (0, 1):
        data = (SYNTH / f"multi_rank.rank{rank}.kineto.json").read_bytes()
        (folder / f"rank{rank}.node1.pt.trace.json.gz").write_bytes(gzip.compress(data, mtime=0))
    (folder / "metadata.json").write_text('{"world_size": 2}')
    return folder


def test_a_folder_of_several_jobs_is_refused_with_its_jobs(tmp_path: Path) -> None:
    """A folder is read as `tracekit analyze` reads it; the TUI shows one job, so several are named, not mixed."""
    folder = jobs_folder(tmp_path)
    assert detect_input(folder) is InputKind.CAPTURE
    with pytest.raises(UsageError, match="3 different jobs") as refused:
        load_session(folder, cache=False)
    assert "multi_rank.rank*.kineto.json (2 ranks)" in refused.value.message
    assert str(folder) in refused.value.render()
    assert "tracekit analyze FOLDER" in refused.value.render()


def test_capture_folder_opens_every_rank_and_r_cycles_them(tmp_path: Path) -> None:
    app = make_app(_capture_folder(tmp_path), cache=False)

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, OverviewScreen)
        assert app.session.kind is InputKind.CAPTURE
        assert len(app.session.traces) == 2
        assert "rank 0 (1 of 2" in text_of(app, "#summary")
        await pilot.press("r")
        assert app.current == (1, 1)
        assert "rank 1 (2 of 2" in text_of(app, "#summary")
        await pilot.press("2")
        assert isinstance(app.screen, TimelineScreen)
        assert app.screen.focus_spec is not None
        assert app.screen.focus_spec.rank == 1

    drive(app, scenario)


def test_batch_output_lists_traces_and_opens_another(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("host_sync", "dataloader_stall"):
        shutil.copy(SYNTH / f"{name}.kineto.json", inputs / f"{name}.kineto.json")
    out = tmp_path / "batch"
    assert main(["batch", str(inputs), "--out", str(out), "--workers", "1"]) == 0
    app = make_app(out, cache=False)

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, OverviewScreen)
        assert app.session.kind is InputKind.BATCH
        assert app.session.catalog is not None
        assert app.trace.name == "dataloader_stall.kineto.json"  # the most GPU time wasted opens first
        await pilot.press("4")
        table = app.screen.query_one("#batch-table", FrameTable)
        assert table.row_count == 2
        await pilot.press("down", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, OverviewScreen)
        assert app.trace.name == "host_sync.kineto.json"
        assert len(app.session.traces) == 2

    drive(app, scenario)


@pytest.mark.slow  # the same screens are driven on the synthetic traces by default
@pytest.mark.shared
def test_full_exploration_of_a_real_trace() -> None:
    """A user's path through a real ResNet training trace: overview → finding → timeline → tables → timeline."""
    path = shared_trace("param/resnet_kineto.json.gz")
    app = make_app(path, cache=False)
    opened: list[OpenTimeline] = []

    async def scenario(pilot: Any) -> None:
        assert isinstance(app.screen, OverviewScreen)
        findings = app.screen.query_one("#findings", FrameTable)
        assert findings.row_count >= 1
        # the DataLoader finding (the replay ranks fp32 GEMMs first on this trace)
        kinds = [f.kind for f in app.trace.diagnosis.findings]
        for _ in range(kinds.index("data_loading")):
            await pilot.press("down")
        await pilot.press("enter")
        assert isinstance(app.screen, FindingScreen)
        await pilot.press("t")
        await settle(app, pilot)  # a trace this size builds step views in a worker thread
        assert isinstance(app.screen, TimelineScreen)
        timeline = timeline_of(app)
        lane, entry = timeline.selected()  # type: ignore[misc]
        assert lane.kind == "idle"  # the DataLoader finding's first gap
        gap = app.trace.diagnosis.timeline.gaps.filter(pl.col("gap_id") == lane.ids[entry]).row(0, named=True)
        assert gap["data_loading_ns"] > 0
        assert len(timeline.lanes) >= 4
        await pilot.press("plus", "plus", "n", "f", "minus", "down", "right", "full_stop")
        await settle(app, pilot)
        assert timeline.view is not None
        assert timeline.view.step != gap["step"]
        await pilot.press("0", "3")
        screen = app.screen
        assert isinstance(screen, TablesScreen)
        await pilot.press("right_square_bracket")  # sync points
        syncs = screen.active_table()
        assert syncs.id == "table-syncs"
        assert syncs.row_count >= 1
        await pilot.press("enter")
        await settle(app, pilot)
        assert isinstance(app.screen, TimelineScreen)
        lane, _entry = timeline_of(app).selected()  # type: ignore[misc]
        assert lane.kind in ("syncs", "track")
        await pilot.press("1")  # back where the overview was left: the finding's detail
        assert isinstance(app.screen, FindingScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)

    drive(app, scenario, hook=lambda m: opened.append(m) if isinstance(m, OpenTimeline) else None)
    assert len(opened) == 2


# ------------------------------------------------------------------ snapshots


SNAP_SIZE = (120, 34)


async def _goto_gap(pilot: Any) -> None:
    await pilot.press("3", "slash", *"sync", "enter", "down", "enter")
    await settle(pilot.app, pilot)


@pytest.mark.parametrize(
    ("keys", "size"),
    [
        pytest.param((), SNAP_SIZE, id="overview"),
        pytest.param((), (80, 24), id="overview-narrow"),
        pytest.param(("enter",), SNAP_SIZE, id="finding"),
        pytest.param(("2",), SNAP_SIZE, id="timeline"),
        pytest.param(("2", "plus", "plus", "down", "down", "right"), SNAP_SIZE, id="timeline-zoomed"),
        pytest.param(("3", "right", "right", "right", "right", "right", "s"), SNAP_SIZE, id="tables-sorted"),
        pytest.param(("question_mark",), SNAP_SIZE, id="help"),
    ],
)
def test_snapshot(snap_compare: Any, host_sync_session: Session, keys: tuple[str, ...], size: tuple[int, int]) -> None:
    app = make_app(session=host_sync_session)

    async def press(pilot: Any) -> None:
        # keys go to the loaded app: pressed during loading, they would race the screens it installs
        await settle(app, pilot)
        if keys:
            await pilot.press(*keys)
        await settle(app, pilot)

    assert snap_compare(app, run_before=press, terminal_size=size)


def test_snapshot_gap_from_table(snap_compare: Any, host_sync_session: Session) -> None:
    """Enter on the second host-sync gap: the timeline zoomed onto it, its details below."""
    app = make_app(session=host_sync_session)
    assert snap_compare(app, run_before=_goto_gap, terminal_size=SNAP_SIZE)


def test_snapshot_error(snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("bad.json").write_text("[1, 2")
    app = make_app("bad.json", cache=False)

    async def wait(pilot: Any) -> None:
        await settle(app, pilot)

    assert snap_compare(app, run_before=wait, terminal_size=(100, 24))


def test_docs_list_every_key_and_show_every_screen() -> None:
    doc = (REPO / "docs" / "tui.md").read_text(encoding="utf-8")
    for _title, specs in GROUPS:
        for spec in specs:
            assert spec.description in doc, spec
    for image in ("overview", "finding", "timeline", "timeline-zoomed", "tables", "syncs", "help"):
        assert f"img/tui-{image}.svg" in doc
        assert (REPO / "docs" / "img" / f"tui-{image}.svg").is_file()


# --------------------------------------------------------------------------- job view


@pytest.fixture(scope="module")
def job_session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    """The synthetic two-rank job (rank 1's backward 5 ms longer), loaded once."""
    folder = tmp_path_factory.mktemp("job")
    for r in (0, 1):
        shutil.copy(SAMPLE_TRACES / "synthetic" / f"multi_rank.rank{r}.kineto.json", folder / f"rank{r}.pt.trace.json")
    return dataclasses.replace(load_session(folder, cache=False), source="job")


def test_job_view_draws_one_lane_per_rank(job_session: Session, host_sync_session: Session) -> None:
    from tracekit.tui.screens.job import COMM, CRITICAL, WAIT, JobScreen

    async def run() -> None:
        app = make_app(session=job_session)
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(app, pilot)
            await pilot.press("5")
            await settle(app, pilot)
            assert isinstance(app.screen, JobScreen)
            lanes = str(app.screen.query_one("#job-lanes").render())
            lines = {ln.split()[1]: ln for ln in lanes.splitlines() if ln.startswith("rank ")}
            assert sorted(lines) == ["0", "1"]
            # the planted straggler: the path runs through rank 1's work, rank 0 waits for it
            assert CRITICAL in lines["1"]
            assert CRITICAL not in lines["0"]
            assert WAIT in lines["0"]
            assert WAIT not in lines["1"]
            assert COMM in lines["0"]
            assert COMM in lines["1"]
            summary = str(app.screen.query_one("#job-summary").render())
            assert "rank 0 waits 5.00 ms per step in collectives (mostly for rank 1)" in summary
            assert "matched by order within its process group" in summary
        # a single trace has no job view: the key does nothing
        single = make_app(session=host_sync_session)
        async with single.run_test(size=(120, 30)) as pilot:
            await settle(single, pilot)
            await pilot.press("5")
            await settle(single, pilot)
            assert not isinstance(single.screen, JobScreen)

    asyncio.run(run())


def test_snapshot_job(snap_compare: Any, job_session: Session) -> None:
    app = make_app(session=job_session)

    async def press(pilot: Any) -> None:
        await settle(app, pilot)
        await pilot.press("5")
        await settle(app, pilot)

    assert snap_compare(app, run_before=press, terminal_size=SNAP_SIZE)


def test_finding_detail_shows_where_in_the_code() -> None:
    """One rank's trace of a capture folder: the data-loading finding names the DataLoader's line."""
    trace = SAMPLE_TRACES / "captures" / "slow_dataloader" / "rank0.cycle0.pt.trace.json.gz"
    app = make_app(session=load_session(trace, cache=False))

    async def scenario(pilot: Any) -> None:
        await pilot.press("enter")
        assert isinstance(app.screen, FindingScreen)
        assert "DataLoader" in text_of(app, "#finding-head")
        assert text_of(app, "#finding-location").startswith("scripts/examples/slow_dataloader.py:61 in main (×5): loader = DataLoader(")

    drive(app, scenario)


def test_finding_detail_without_a_location_has_no_code_section(host_sync_session: Session) -> None:
    app = make_app(session=host_sync_session)

    async def scenario(pilot: Any) -> None:
        await pilot.press("enter")
        assert isinstance(app.screen, FindingScreen)
        assert not app.screen.query("#finding-location")

    drive(app, scenario)
