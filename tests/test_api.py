"""The notebook/script API (tracekit.analyze, tracekit.diff): the same answers as the command line,
tables one attribute away, displays that show the findings (checked in a real headless browser)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path

import polars as pl
import pytest
import screenshot_report as shots
from conftest import REPO, SAMPLE_TRACES, jobs_folder

import tracekit
from tracekit.api import DiffReport, FolderReport, JobReport, TraceReport, what_if_questions
from tracekit.cli import main
from tracekit.errors import TraceNotFoundError, UsageError
from tracekit.report.svg import CAUSE_COLORS

SYN = SAMPLE_TRACES / "synthetic"
CAPTURES = SAMPLE_TRACES / "captures"
STALL = SYN / "dataloader_stall.kineto.json"
FIXED = SYN / "dataloader_fixed.kineto.json"


@cache
def _stall() -> TraceReport:
    r = tracekit.analyze(STALL, cache=False)
    assert isinstance(r, TraceReport)
    return r


@cache
def _job() -> JobReport:
    r = tracekit.analyze(CAPTURES / "ddp_gloo", cache=False)
    assert isinstance(r, JobReport)
    return r


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(args) == 0
    return capsys.readouterr().out


# --------------------------------------------------------------------------- one call, same answers


def test_analyze_a_trace_finds_the_planted_stall() -> None:
    r = _stall()
    truth = json.loads((SYN / "dataloader_stall.expected.json").read_text())
    planted_ms = truth["headline"]["data_loading_idle_ns_per_step"] / 1e6
    # the loop's loss.item() keeps the host from loading the next batch while the GPU computes:
    # removing the sync saves the same 40 ms as fixing the loader (the replay prices both)
    assert r.findings["kind"].to_list() == [truth["expected_top_cause"], "host_device_sync"]
    stalls = r.gaps.filter(pl.col("cause") == "data_loading")
    per_step = stalls.group_by("step").agg(pl.col("data_loading_ns").sum() / 1e6)
    assert per_step.height == 8
    assert per_step["data_loading_ns"].to_list() == pytest.approx([planted_ms] * 8, abs=0.05)
    row = r.findings.row(0, named=True)
    assert row["ms_per_step"] == pytest.approx(planted_ms, abs=0.05)
    # fixing it leaves the GPU work: the planted kernel time per step
    assert row["predicted_step_ms"] == pytest.approx(truth["headline"]["kernel_ns_per_step"] / 1e6, abs=0.1)
    assert row["saving_ms"] == pytest.approx(planted_ms, abs=0.1)
    assert json.loads(row["evidence"])["single_process_dataloader"] is True


def test_tables_have_their_documented_columns() -> None:
    r = _stall()
    assert r.findings.columns == ["kind", "title", "ms_per_step", "share_of_step", "predicted_step_ms", "saving_ms",
                                  "steps_affected", "worst_steps", "fix", "evidence"]
    assert {"rank", "step", "start_ns", "end_ns", "dur_ns", "complete", "utilization", "data_loading_ns", "compute_ns"} <= set(r.steps.columns)
    assert r.steps.height == 8
    # each step's causes tile the step
    tiles = r.steps.select(pl.sum_horizontal(pl.col("^.*_ns$").exclude("start_ns", "end_ns", "dur_ns", "cpu_end_ns", "gpu_busy_ns")))
    assert tiles.to_series().to_list() == r.steps["dur_ns"].to_list()
    assert {"rank", "device", "step", "start_ns", "end_ns", "dur_ns", "cause"} <= set(r.gaps.columns)
    assert {"name", "category", "tensor_cores", "count", "total_ns", "mean_ns", "share_of_kernel_time"} <= set(r.kernels.columns)
    # every kernel, not only the report's top 15
    truth = json.loads((SYN / "dataloader_stall.expected.json").read_text())["kernels"]["by_short_name"]
    assert r.kernels["count"].sum() == sum(k["count"] for k in truth.values())
    assert r.what_ifs.columns == ["what_if", "asked", "findings", "baseline_step_ms", "predicted_step_ms", "saving_ms"]
    assert r.what_ifs.filter(pl.col("findings").list.contains("data_loading")).height == 1
    assert r.syncs.filter(pl.col("step").is_not_null()).height == 8  # one cudaStreamSynchronize per step


def test_to_json_equals_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert _stall().to_json() == _cli(["analyze", str(STALL), "--no-cache", "--format", "json"], capsys)
    asked = tracekit.analyze(STALL, what_if=["data_loading=0", "host_device_sync=0.5"], cache=False)
    assert isinstance(asked, TraceReport)
    cli = _cli(["analyze", str(STALL), "--format", "json", "--what-if", "data_loading=0", "--what-if", "host_device_sync=0.5"], capsys)
    assert asked.to_json() == cli
    assert asked.what_ifs.filter("asked")["what_if"].to_list() == ["data_loading=0", "host_device_sync=0.5",
                                                                     "data_loading=0, host_device_sync=0.5"]
    assert _job().to_json() == _cli(["analyze", str(CAPTURES / "ddp_gloo"), "--format", "json"], capsys)


def test_text_and_markdown_equal_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert str(_stall()) == _cli(["analyze", str(STALL)], capsys)
    assert _stall().to_markdown() == _cli(["analyze", str(STALL), "--format", "markdown"], capsys)
    assert _stall().to_html() == _cli(["analyze", str(STALL), "--format", "html"], capsys)
    assert str(_job()) == _cli(["analyze", str(CAPTURES / "ddp_gloo")], capsys)


def test_diff_equals_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    d = tracekit.diff(STALL, FIXED, cache=False)
    assert isinstance(d, DiffReport)
    assert d.to_json() == _cli(["diff", str(STALL), str(FIXED), "--format", "json"], capsys)
    assert str(d) == _cli(["diff", str(STALL), str(FIXED)], capsys)
    assert d.to_html() == _cli(["diff", str(STALL), str(FIXED), "--format", "html"], capsys)
    assert d.to_markdown() == _cli(["diff", str(STALL), str(FIXED), "--format", "markdown"], capsys)
    assert d.verdict == "faster"
    assert sorted(d.findings.select("kind", "status").rows()) == [("data_loading", "fixed"), ("host_device_sync", "fixed")]
    assert d.causes.filter(pl.col("cause") == "data_loading")["delta_ms"].item() == pytest.approx(-38.0, abs=0.05)
    # an analysed report can stand for a path
    assert tracekit.diff(_stall(), FIXED).to_json() == d.to_json()


def test_a_folder_of_several_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = jobs_folder(tmp_path)
    r = tracekit.analyze(folder, cache=False)
    assert isinstance(r, FolderReport)
    assert len(r) == 3
    assert r.summary["job"].to_list() == ["dataloader_stall.kineto.json", "host_sync.kineto.json", "multi_rank.rank*.kineto.json"]
    assert r.summary["ranks"].to_list() == [1, 1, 2]
    assert r.summary["top_finding"].to_list() == ["data_loading", "host_device_sync", "straggler"]
    assert r["host_sync.kineto.json"].ranks[0].findings["kind"].to_list() == ["host_device_sync"]
    assert r[2].job.rank_numbers == (0, 1)
    with pytest.raises(KeyError, match="no job 'nope'"):
        r["nope"]
    assert r.findings.filter(pl.col("job") == "multi_rank.rank*.kineto.json", pl.col("rank").is_null())["kind"].to_list() == ["straggler"]
    assert r.to_json() == _cli(["analyze", str(folder), "--format", "json"], capsys)
    doc = json.loads(r.to_json())
    assert doc["schema"] == "tracekit.jobs/1"
    assert [j["job"]["ranks"] for j in doc["jobs"]] == [[0], [0], [0, 1]]
    text = _cli(["analyze", str(folder)], capsys)
    assert text.startswith(f"tracekit · folder {folder} · 3 jobs")
    for title in ("The GPU waits for the DataLoader", "Host-device synchronisation stalls the GPU", "Straggler rank(s)"):
        assert title in text
    md = _cli(["analyze", str(folder), "--format", "markdown"], capsys)
    assert "| `multi_rank.rank*.kineto.json` | 2 |" in md
    page = _cli(["analyze", str(folder), "--format", "html"], capsys)
    assert page.startswith("<!DOCTYPE html>")
    assert "3 jobs" in page
    assert "<script" not in page


def test_a_list_of_rank_files_is_one_job() -> None:
    r = tracekit.analyze([SYN / "multi_rank.rank0.kineto.json", SYN / "multi_rank.rank1.kineto.json"], cache=False)
    assert isinstance(r, JobReport)
    assert r.job.rank_numbers == (0, 1)
    assert r.findings.filter(pl.col("rank").is_null())["kind"].to_list()[:1] == ["straggler"]
    assert r.steps.group_by("rank").len().sort("rank")["len"].to_list() == [r.ranks[0].steps.height, r.ranks[1].steps.height]


def test_options_and_errors(tmp_path: Path) -> None:
    assert what_if_questions(None) == []
    assert what_if_questions({"kernels": 0.5}) == [{"kernels": 0.5}]
    with pytest.raises(UsageError, match="unknown what-if cause"):
        tracekit.analyze(STALL, what_if="dataloading=0")
    with pytest.raises(UsageError, match="must be a number"):
        tracekit.analyze(STALL, what_if={"data_loading": "none"})  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="one trace"):
        tracekit.analyze(CAPTURES / "ddp_gloo", what_if="data_loading=0")
    with pytest.raises(UsageError, match="expects a trace path"):
        tracekit.analyze(42)  # type: ignore[arg-type]
    with pytest.raises(TraceNotFoundError) as missing:
        tracekit.analyze(tmp_path / "nope.json")
    assert "nope.json" in str(missing.value)
    with pytest.raises(UsageError, match="not jobs"):
        tracekit.diff(_job(), STALL)  # type: ignore[arg-type]
    out = _stall().save(tmp_path / "r" / "report.html")
    assert out.read_text(encoding="utf-8") == _stall().to_html()
    assert json.loads(_stall().save(tmp_path / "r.json").read_text())["schema"] == "tracekit.report/1"
    with pytest.raises(UsageError, match="no step 99"):
        _stall().view(0, 99)


def test_repr_is_readable() -> None:
    text = repr(_stall())
    assert text.splitlines()[0] == f"TraceReport({str(STALL)!r})"
    assert "step time 100.01 ms (median) · GPU utilization 60.0%" in text
    assert "1. The GPU waits for the DataLoader [data_loading]: 40.00 ms per step (40.0%), 60.01 ms per step if fixed" in text
    job = repr(_job())
    assert "findings across ranks:" in job
    assert "Straggler rank(s)" in job
    assert "rank 1:" in job
    d = repr(tracekit.diff(_stall(), FIXED))
    assert "faster: -38.00 ms per step (-38.0%)" in d
    assert "fixed: The GPU waits for the DataLoader" in d


def test_import_stays_light_and_headless() -> None:
    code = (
        "import sys, tracekit\n"
        "assert 'polars' not in sys.modules and 'tracekit.api' not in sys.modules\n"
        f"r = tracekit.analyze({str(STALL)!r})\n"
        "r._repr_html_(); r._repr_markdown_(); repr(r); r.findings; r.kernels\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'textual'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --------------------------------------------------------------------------- displays


def _displays(tmp_path: Path) -> dict[str, tuple[str, list[str]]]:
    """name → (its _repr_html_, the finding titles it must show)."""
    folder = tracekit.analyze(jobs_folder(tmp_path), cache=False)
    diff = tracekit.diff(_stall(), FIXED)
    return {
        "trace": (_stall()._repr_html_(), ["The GPU waits for the DataLoader"]),
        "job": (_job()._repr_html_(), ["Straggler rank(s): the other ranks wait in their collectives"]),
        "folder": (folder._repr_html_(), ["The GPU waits for the DataLoader", "Host-device synchronisation stalls the GPU",
                                          "Straggler rank(s)"]),
        "diff": (diff._repr_html_(), ["fixed: The GPU waits for the DataLoader"]),
    }


def test_displays_are_self_contained_fragments(tmp_path: Path) -> None:
    for name, (html, titles) in _displays(tmp_path).items():
        assert html.startswith('<div class="tracekit-report">'), name
        for tag in ("<script", "<html", "<body"):
            assert tag not in html, (name, tag)
        assert not re.search(r"""(src|href)=["']?https?:""", html), name
        for title in titles:
            assert title in html, (name, title)
        # the style is scoped: no rule reaches outside the fragment
        style = html.split("<style>", 1)[1].split("</style>", 1)[0]
        selectors = [s.strip() for block in re.findall(r"([^{}]+)\{", style) for s in block.split(",")]
        assert selectors, name
        assert all(s.startswith(".tracekit-report") for s in selectors), name
        for svg in re.findall(r"<svg\b.*?</svg>", html, flags=re.S):
            ET.fromstring(svg)  # well-formed pictures
    trace_html = _stall()._repr_html_()
    assert trace_html.count("<svg") == 4  # fix plan, breakdown, timeline (and the steps chart, folded)
    assert "Fix:" in trace_html
    assert "Timeline of step" in trace_html


def _chromium_or_skip() -> None:
    if shots.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; scripts/test installs it when it can)")


def test_displays_render_in_headless_chromium(tmp_path: Path) -> None:
    _chromium_or_skip()
    for name, (html, titles) in _displays(tmp_path).items():
        # as a notebook shows it: the fragment inside someone else's page
        page = tmp_path / f"{name}.html"
        page.write_text(
            '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
            f'<body style="margin:0; padding:8px; max-width:1000px">{html}</body></html>',
            encoding="utf-8",
        )
        shot = shots.screenshot(page, tmp_path / f"{name}.png", width=1024, height=1400)
        assert shot.returncode == 0, (name, shot.stderr[-2000:])
        assert shot.console == (), (name, shot.console)
        image = shots.read_png(shot.png)
        assert len(image.pixels()) > 200, name  # not a blank page
        # the findings' colour is on screen: the data-loading bar/gaps, or the straggler finding's border
        assert image.count(shots.hex_rgb(CAUSE_COLORS["compute"])) > 5_000, name
        dom = shots.dump_dom(page)
        for title in titles:
            assert title.replace("&", "&amp;") in dom, (name, title)
    stall = shots.read_png(tmp_path / "trace.png")
    assert stall.count(shots.hex_rgb(CAUSE_COLORS["data_loading"])) > 10_000  # the stall in the bar and the timeline


def test_the_notebook_report_has_the_answer_and_the_plan() -> None:
    r = tracekit.analyze("sample_traces/synthetic/dataloader_stall.kineto.json")
    assert r.answer is not None
    assert r.answer.startswith("The GPU is idle 40% of each step")
    assert r.plan["kind"].to_list() == ["data_loading"]
    assert r.plan["alternatives"].to_list() == [["host_device_sync"]]
    assert r.plan["predicted_step_ms"][0] == pytest.approx(60.0, abs=0.1)
    assert r.answer in repr(r)
