"""The HTML report: self-contained, pictures that show what the analyses found (the planted gap,
sync points, the critical path when there is one), and a real headless browser renders it."""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import screenshot_report as shots
from conftest import REPO, SAMPLE_TRACES, shared_trace, write_trace

import tracekit
from tracekit.analysis import Diagnosis, diagnose
from tracekit.analysis.view import StepView, representative_step, step_view
from tracekit.cli import main
from tracekit.report.html import render_html
from tracekit.report.svg import CAUSE_COLORS, CRITICAL_COLOR, LABEL_W, SYNC_COLOR, timeline_svg
from tracekit.report.text import render_markdown

SYN = SAMPLE_TRACES / "synthetic"
SVG_NS = "{http://www.w3.org/2000/svg}"


@cache
def _load(name: str) -> tuple[Diagnosis, StepView]:
    tables = tracekit.read_trace(SYN / name, cache=False)
    d = diagnose(tables)
    pick = representative_step(d.steps)
    assert pick is not None
    return d, step_view(tables, d.steps, d.timeline.gaps, d.syncs, *pick)


def _svgs(html: str) -> list[ET.Element]:
    blocks = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    return [ET.fromstring(b) for b in blocks]  # each picture is well-formed XML


def _titled(svg: ET.Element, tag: str) -> list[tuple[ET.Element, str]]:
    out = []
    for el in svg.iter(f"{SVG_NS}{tag}"):
        t = el.find(f"{SVG_NS}title")
        out.append((el, "" if t is None or t.text is None else t.text))
    return out


def _with_critical_path(d: Diagnosis, segments: pl.DataFrame) -> Diagnosis:
    cp = type("CriticalPath", (), {"segments": segments})()
    if "critical_path" in {f.name for f in dataclasses.fields(d)}:
        return dataclasses.replace(d, critical_path=cp)  # type: ignore[call-arg]
    clone = dataclasses.replace(d)
    object.__setattr__(clone, "critical_path", cp)  # until Diagnosis grows the field
    return clone


def test_html_is_self_contained() -> None:
    d, view = _load("host_sync.kineto.json")
    html = render_html(d, view)
    assert html.startswith("<!DOCTYPE html>")
    assert "<script" not in html.lower()
    assert "Content-Security-Policy" in html
    assert "default-src 'none'" in html
    # nothing to fetch: the only URL is the SVG namespace
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) <= {"http://www.w3.org/2000/svg"}
    assert not re.search(r"\b(src|href)\s*=", html)
    assert "url(" not in html
    assert "@import" not in html
    assert len(_svgs(html)) == 4  # fix plan, breakdown, steps, timeline
    assert render_html(d, view) == html  # deterministic


def test_the_plan_picture_shows_the_step_today_and_after_each_step() -> None:
    d, view = _load("host_sync.kineto.json")
    html = render_html(d, view)
    plan = _svgs(html)[0]
    titles = [t.text or "" for t in plan.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("today: 75.01 ms") for t in titles)
    assert any(t.endswith("60.00 ms per step") for t in titles)
    assert d.plan.sentence() in html.replace("&#x27;", "'")


def test_report_content() -> None:
    d, view = _load("host_sync.kineto.json")
    html = render_html(d, view)
    assert "75.01 ms" in html
    assert "80.0%" in html
    assert "Host-device synchronisation stalls the GPU" in html
    assert "Fix:</b> Remove synchronisations" in html
    assert "cudaStreamSynchronize in aten::item ×8" in html  # evidence
    assert "<h2>Top kernels</h2>" in html
    assert "sm90_xmma_gemm_f32f32" in html
    assert f"Timeline of step {view.step} (rank {view.rank})" in html
    assert "critical path #0:" in html  # diagnose computes the critical path; the timeline draws it


def test_breakdown_and_steps_charts() -> None:
    d, view = _load("dataloader_stall.kineto.json")
    _plan, breakdown, steps, _ = _svgs(render_html(d, view))
    bars = {el.get("fill"): float(el.get("width", 0)) for el, title in _titled(breakdown, "rect") if "per step" in title}
    width = float(breakdown.get("width", 0))
    assert bars[CAUSE_COLORS["data_loading"]] / width == pytest.approx(0.40, abs=0.002)
    assert bars[CAUSE_COLORS["compute"]] / width == pytest.approx(0.60, abs=0.002)
    tips = [t for _, t in _titled(steps, "rect") if t.startswith("step ")]
    assert len(tips) == d.steps.height
    assert all("GPU busy 60.0%" in t and "data loading 40.00 ms" in t for t in tips)


def test_timeline_shows_the_planted_gap() -> None:
    _d, view = _load("dataloader_stall.kineto.json")
    svg = ET.fromstring(timeline_svg(view))
    plot_w = float(svg.get("width", 0)) - LABEL_W - 16
    idle = [(el, t) for el, t in _titled(svg, "rect") if t.startswith("GPU 0 idle")]
    loading = sum(float(el.get("width", 0)) for el, t in idle if el.get("fill") == CAUSE_COLORS["data_loading"])
    # the 40 ms data-loading gap of a 100 ms step covers 40% of the plot
    assert loading / plot_w == pytest.approx(40.0 / 100.0136, abs=0.002)
    # every lane of the view is labelled; kernels are drawn on the GPU lane
    labels = {t for _, t in _titled(svg, "text") if t}
    assert set(view.tracks["label"].to_list()) <= labels
    kernels = [t for _, t in _titled(svg, "rect") if "· kernel ·" in t]
    assert len(kernels) == view.events.filter(pl.col("kind") == "kernel").height


def test_timeline_marks_sync_points() -> None:
    _d, view = _load("host_sync.kineto.json")
    assert view.syncs.height == 1
    svg = ET.fromstring(timeline_svg(view))
    markers = [t for el, t in _titled(svg, "polygon") if el.get("fill") == SYNC_COLOR]
    assert markers == ["sync: cudaStreamSynchronize in aten::item, blocked 59.82 ms"]
    outlines = [el for el, t in _titled(svg, "rect") if el.get("stroke") == SYNC_COLOR]
    assert len(outlines) == 1
    # the outline sits on the row of the call (its nesting depth), not on the step range above it
    depth = view.events.filter(pl.col("event_id") == view.syncs["event_id"][0])["depth"][0]
    assert depth > 0
    lane_top = min(float(el.get("y", 0)) for el, t in _titled(svg, "rect") if t.startswith("ProfilerStep#"))
    assert float(outlines[0].get("y", 0)) == pytest.approx(lane_top + depth * 11, abs=0.11)


def test_timeline_draws_the_critical_path_when_present() -> None:
    d, view = _load("host_sync.kineto.json")
    cpu_track = view.tracks.filter(pl.col("side") == "cpu")["track"][0]
    gpu_track = view.tracks.filter(pl.col("side") == "gpu")["track"][0]
    first_cpu = view.events.filter(pl.col("track") == cpu_track).sort("start_ns").row(0, named=True)
    last_gpu = view.events.filter(pl.col("track") == gpu_track).sort("end_ns").row(-1, named=True)
    rows: list[dict[str, Any]] = [
        {"track": cpu_track, "ev": first_cpu, "edge_kind": "cpu", "cause": None, "inferred": False},
        {"track": gpu_track, "ev": last_gpu, "edge_kind": "gpu", "cause": "compute", "inferred": True},
        {"track": None, "ev": last_gpu, "edge_kind": "wait", "cause": "host_device_sync", "inferred": False},
    ]
    segments = pl.DataFrame(
        [
            {"rank": view.rank, "step": view.step, "seq": i, "start_ns": r["ev"]["start_ns"], "end_ns": r["ev"]["end_ns"],
             "dur_ns": r["ev"]["end_ns"] - r["ev"]["start_ns"], "track": r["track"], "event_id": r["ev"]["event_id"],
             "edge_kind": r["edge_kind"], "cause": r["cause"], "inferred": r["inferred"]}
            for i, r in enumerate(rows)
        ]
        + [{"rank": view.rank, "step": view.step + 1, "seq": 0, "start_ns": 0, "end_ns": 1, "dur_ns": 1, "track": cpu_track,
            "event_id": 0, "edge_kind": "cpu", "cause": None, "inferred": False}]
    )
    with_cp = _with_critical_path(d, segments)
    html = render_html(with_cp, view)
    timeline = _svgs(html)[3]
    path = [(el, t) for el, t in _titled(timeline, "line") if el.get("stroke") == CRITICAL_COLOR and t]
    assert [t.split(":")[0] for _, t in path] == ["critical path #0", "critical path #1"]  # other steps/tracks skipped
    assert path[1][0].get("stroke-dasharray") == "4 2"  # inferred segment drawn dashed
    assert "critical path: 2 segments highlighted" in html
    assert "critical path not computed" not in html
    md = render_markdown(with_cp, view=view)
    assert "Critical path: 3 segments; the longest:" in md
    assert "Critical path not computed." in render_markdown(dataclasses.replace(d, critical_path=None), view=view)


def test_predicted_step_time_is_rendered() -> None:
    d, view = _load("dataloader_stall.kineto.json")
    f = dataclasses.replace(d.findings[0], predicted_step_ms=62.0136)
    d2 = dataclasses.replace(d, findings=(f,))
    assert "Predicted step time if fixed: <b>62.01 ms</b>" in render_html(d2, view)
    assert "| 62.01 ms |" in render_markdown(d2, view=view)
    unpredicted = tuple(dataclasses.replace(x, predicted_step_ms=None) for x in d.findings)
    assert "Predicted step time" not in render_html(dataclasses.replace(d, findings=unpredicted), view)


def test_markdown_carries_the_report_content() -> None:
    d, view = _load("host_sync.kineto.json")
    md = render_markdown(d, view=view, image="https://example.org/report.png")
    for needle in [
        "### Where the step time goes", "Step time and GPU utilization per step", f"### Timeline of step {view.step} (rank 0)",
        "| host-device sync | 15.004 |", "| `cudaStreamSynchronize` | `aten::item` |", "### Findings", "### Sync points",
        "### Top kernels", "![tracekit report](https://example.org/report.png)",
    ]:
        assert needle in md, needle
    assert "<svg" not in md


def test_cli_html_to_stdout_and_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert main(["analyze", "sample_traces/synthetic/pageable_memcpy.nsys.sqlite", "--format", "html"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<!DOCTYPE html>")
    assert out.rstrip().endswith("</html>")
    target = tmp_path / "sub" / "report.html"
    assert main(["analyze", "sample_traces/synthetic/pageable_memcpy.nsys.sqlite", "-f", "html", "-o", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == out
    assert main(["analyze", "sample_traces/synthetic/host_sync.kineto.json", "-f", "markdown", "--image", "shot.png"]) == 0
    assert "![tracekit report](shot.png)" in capsys.readouterr().out


def test_cpu_only_trace_renders(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "cpu.json", [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
    ])
    tables = tracekit.read_trace(trace)
    d = diagnose(tables)
    pick = representative_step(d.steps)
    view = None if pick is None else step_view(tables, d.steps, d.timeline.gaps, d.syncs, *pick)
    html = render_html(d, view)
    assert "CPU-only trace" in html
    for svg in _svgs(html):
        assert svg.tag == f"{SVG_NS}svg"
    assert render_html(d, None).count("<svg") <= html.count("<svg")


def test_real_trace_report() -> None:
    path = shared_trace("param/resnet_kineto.json.gz")
    tables = tracekit.read_trace(path)
    d = diagnose(tables)
    pick = representative_step(d.steps)
    assert pick is not None
    view = step_view(tables, d.steps, d.timeline.gaps, d.syncs, *pick, max_events=6000)
    html = render_html(d, view)
    timeline = _svgs(html)[3]
    assert len(_titled(timeline, "rect")) > view.events.height  # every event plus gaps and lanes
    assert "The GPU waits for the DataLoader" in html


# --------------------------------------------------------------------------- a real browser


def _chromium_or_skip() -> None:
    if shots.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; scripts/test installs it when it can)")


def test_renders_in_headless_chromium(tmp_path: Path) -> None:
    _chromium_or_skip()
    d, view = _load("dataloader_stall.kineto.json")
    page = tmp_path / "report.html"
    page.write_text(render_html(d, view), encoding="utf-8")
    shot = shots.screenshot(page, tmp_path / "report.png", width=1280, height=1400)
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert shot.console == (), shot.console  # no errors, no blocked fetches
    image = shots.read_png(shot.png)
    assert (image.width, image.height) == (1280, 1400)
    assert len(image.pixels()) > 200  # not a blank page
    # the pictures are on screen: the data-loading idle gap and the compute bars in their colours
    assert image.count(shots.hex_rgb(CAUSE_COLORS["data_loading"])) > 20_000
    assert image.count(shots.hex_rgb(CAUSE_COLORS["compute"])) > 20_000
    dom = shots.dump_dom(page)
    assert dom.count("<svg") == 4
    assert "The GPU waits for the DataLoader" in dom


def test_timeline_picture_is_not_empty_in_chromium(tmp_path: Path) -> None:
    _chromium_or_skip()
    _, view = _load("host_sync.nsys.sqlite")
    page = tmp_path / "timeline.html"
    page.write_text(f"<!DOCTYPE html><html><body style='margin:0'>{timeline_svg(view)}</body></html>", encoding="utf-8")
    shot = shots.screenshot(page, tmp_path / "timeline.png", width=1200, height=400)
    assert shot.returncode == 0
    assert shot.console == ()
    image = shots.read_png(shot.png)
    assert image.count(shots.hex_rgb(CAUSE_COLORS["host_device_sync"])) > 2_000  # the 15 ms sync gap
    assert image.count(shots.hex_rgb("#4c78a8")) > 2_000  # kernels
    assert image.count(shots.hex_rgb(SYNC_COLOR)) > 10  # the sync marker
