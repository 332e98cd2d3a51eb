"""The cause registry (tracekit.analysis.causes) is the one vocabulary: every declared cause,
path category, what-if knob and finding kind reaches the analyses, every renderer, the TUI's
stylesheet, the CLI help and the docs; and the declarations agree with each other."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from tracekit import read_trace
from tracekit.analysis import causes, diagnose
from tracekit.analysis.causes import (
    BREAKDOWN,
    BY_NAME,
    CAUSES,
    CP_CAUSES,
    EDGE_TAGS,
    FINDINGS,
    IDLE_CAUSES,
    IDLE_LIKE,
    KNOBS,
    PATH,
)
from tracekit.analysis.findings import Finding
from tracekit.analysis.whatif import TAGS, WhatIf
from tracekit.report import formatting, svg

REPO = Path(__file__).resolve().parents[1]
SYNTH = REPO / "sample_traces" / "synthetic"
DOCS = REPO / "docs"


def test_declarations_agree() -> None:
    names = [c.name for c in BREAKDOWN]
    assert len(set(names)) == len(names)
    assert len({c.color for c in BREAKDOWN}) == len(BREAKDOWN), "two causes share an HTML colour"
    assert len({c.term_color for c in BREAKDOWN}) == len(BREAKDOWN), "two causes share a TUI colour"
    # one order: the idle causes' precedence is the entries' order, the causes that mark host
    # intervals of their own before those that take any other host work, unattributed last
    idle = [c for c in BREAKDOWN if c.idle]
    assert list(IDLE_CAUSES) == [c.name for c in idle]
    first_catch_all = next(i for i, c in enumerate(idle) if c.detector is None)
    assert all(c.detector is None for c in idle[first_catch_all:]), "a detector after a catch-all claims nothing"
    assert idle[-1].name == "unattributed"
    for p in PATH:
        assert p.colour_of in BY_NAME, p
    assert set(EDGE_TAGS.values()) == set(CP_CAUSES), "every path cause is made of some tag"
    for k in KNOBS:
        assert k.tags, k
        assert k.tags <= set(EDGE_TAGS), k
    knobs = {k.name for k in KNOBS}
    for f in FINDINGS:
        if f.what_if is not None:
            assert set(f.what_if) <= knobs, f.name
            WhatIf.of(f.what_if)  # valid factors
        if f.measured:
            assert f.name in CAUSES, f"{f.name}: a measured finding reads the breakdown column of its name"
            assert f.what_if_doc or f.what_if == {f.name: 0.0}, f"{f.name}: its docs row says 'that cause at 0'"
        if f.name in IDLE_LIKE:
            assert f.name in IDLE_CAUSES, f.name


@pytest.mark.parametrize("fmt", ["kineto.json", "nsys.sqlite"])
def test_analyses_produce_every_declared_cause(fmt: str) -> None:
    d = diagnose(read_trace(SYNTH / f"host_sync.{fmt}", cache=False))
    assert [c.removesuffix("_ns") for c in d.timeline.per_step.columns if c.endswith("_ns")][-len(CAUSES):] == list(CAUSES)
    assert {f"{c}_ns" for c in IDLE_CAUSES} <= set(d.timeline.gaps.columns)
    assert set(d.timeline.gaps["cause"].unique().to_list()) <= set(IDLE_CAUSES)
    assert list(d.breakdown) == list(CAUSES)
    assert d.critical_path is not None
    assert set(TAGS) == set(EDGE_TAGS)
    assert set(d.critical_path.breakdown_per_step()) == set(CP_CAUSES)


def test_svg_and_html_have_every_cause() -> None:
    share = {c: 1.0 / len(CAUSES) for c in CAUSES}
    ms = dict.fromkeys(CAUSES, 1.0)
    bar = svg.breakdown_svg(share, ms)
    for c in BREAKDOWN:
        assert c.color in bar, c.name
        assert c.label in bar, c.name
    # an undeclared cause (a newer analysis, an older renderer) is drawn, never a KeyError
    assert causes.cause_color("not_a_cause") == BY_NAME["unattributed"].color
    assert causes.cause_label("not_a_cause") == "not_a_cause"


def test_text_formatting_has_every_cause_and_finding() -> None:
    for c in BREAKDOWN:
        assert formatting.cause_label(c.name) == c.label
        assert formatting.SHORT_LABELS[c.name] == c.short_label
    for p in PATH:
        assert formatting.path_label(p.name) == p.label
    for f in FINDINGS:
        # every kind renders its evidence, even an empty one
        finding = Finding(kind=f.name, title=f.title, ms_per_step=1.0, share_of_step=0.1, evidence={}, fix=f.fix)
        assert isinstance(formatting.evidence_text(finding), str)
        if f.job:
            assert isinstance(formatting.job_evidence_text(finding), str)
    # a kind the formatter has no wording for (a newly declared one) still shows its plain facts
    new = Finding(kind="small_gemms", title="t", ms_per_step=1.0, share_of_step=0.1, fix="f",
                  evidence={"total_ms": 3.0, "gemms_per_step": 120, "median_gemm_us": 4.5, "names": ["a"]})
    assert formatting.evidence_text(new) == "gemms per step 120; median gemm us 4.5"


def test_every_kind_names_its_evidence_builder_and_wording() -> None:
    from tracekit.analysis.causes import evidence

    for f in FINDINGS:
        if f.measured:
            # a measured cause's evidence is built from the breakdown (its own builder or the common facts)
            assert f.evidence == causes.GENERIC or callable(f.evidence), f.name
        else:
            # any other kind's detector writes its evidence: no builder would ever be called for it
            assert f.evidence == causes.DETECTOR, f.name
        assert f.wording == causes.GENERIC or f.wording in formatting.EVIDENCE_WORDING, f.name
        if f.job:
            assert f.job_wording in formatting.JOB_WORDING, f.name
        else:
            assert f.job_wording == causes.GENERIC or f.job_wording in formatting.JOB_WORDING, f.name
    # nothing is written that no kind names (dead wording would hide a misspelt declaration)
    builders = {fn for name, fn in vars(evidence).items() if name.endswith("_evidence") and callable(fn)}
    assert builders == {f.evidence for f in FINDINGS if callable(f.evidence)}
    assert set(formatting.EVIDENCE_WORDING) == {f.wording for f in FINDINGS} - {causes.GENERIC}
    assert set(formatting.JOB_WORDING) == {f.job_wording for f in FINDINGS} - {causes.GENERIC}


def test_a_kind_declared_generic_shows_its_plain_facts() -> None:
    import dataclasses

    # a declared kind that names no wording of its own reads like an undeclared one
    kind = causes.FINDING_BY_NAME["straggler"]
    assert kind.wording == causes.GENERIC
    f = Finding(kind="straggler", title=kind.title, ms_per_step=1.0, share_of_step=0.1, fix=kind.fix,
                evidence={"total_ms": 2.0, "basis": "collective_start", "matched_collectives": 7, "x": [1]})
    assert formatting.evidence_text(f) == "basis collective_start; matched collectives 7"
    assert formatting.job_evidence_text(f).endswith("7 collectives matched across ranks")
    # the largest gap is worded for every kind, generic or not
    gap = dataclasses.replace(f, evidence={"largest_gap": {"dur_ms": 1.5, "step": 3}})
    assert formatting.evidence_text(gap) == "largest gap 1.50 ms in step 3"


def test_annotated_trace_colours_every_path_cause() -> None:
    from tracekit.report import annotate

    # the Chrome trace viewer's reserved colour names
    chrome = {"good", "bad", "terrible", "yellow", "olive", "grey", "black", "white", "generic_work", "thread_state_running",
              "rail_response", "rail_animation", "rail_idle", "rail_load", "startup", "heap_dump_stack_frame",
              "cq_build_running", "cq_build_passed", "cq_build_failed", "cq_build_abandoned"}
    for p in PATH:
        assert annotate._CAUSE_COLOURS[p.name] in chrome, p.name


def test_tui_stylesheet_styles_every_component_class() -> None:
    pytest.importorskip("textual")
    from textual.css.stylesheet import Stylesheet

    from tracekit.tui.styles import cause_css, cause_variables
    from tracekit.tui.widgets.charts import BreakdownChart, GapLegend
    from tracekit.tui.widgets.timeline import TimelineView

    css = cause_css()
    tcss = (REPO / "tracekit" / "tui" / "app.tcss").read_text(encoding="utf-8")
    # every $cause-* the hand-written stylesheet uses is a generated variable
    for var in set(re.findall(r"\$(cause-[a-z-]+|on-cause)\b", tcss)):
        assert var in cause_variables(), var
    wanted = {
        *(f"BreakdownChart > .breakdown--{c}" for c in CAUSES),
        *(f"TimelineView > .timeline--gap-{c}" for c in IDLE_CAUSES),
        *(f"TimelineView > .timeline--path-{c}" for c in CP_CAUSES),
        *(f"GapLegend > .legend--{c}" for c in IDLE_CAUSES),
    }
    for selector in wanted:
        assert selector + " {" in css, selector
    # the widgets declare the classes the rules style
    declared = BreakdownChart.component_classes() | GapLegend.component_classes() | TimelineView.component_classes()
    for selector in wanted:
        assert selector.split(" > .")[1] in declared, selector
    # and it parses, with the theme's variables and ours
    from textual.app import App

    variables = {**App().get_css_variables(), **cause_variables()}
    sheet = Stylesheet(variables=variables)
    sheet.add_source(tcss, read_from=("app.tcss", ""))
    sheet.add_source(css, read_from=("cause_css", ""))
    sheet.parse()
    assert len(sheet.rules) > len(wanted)


def test_cli_help_lists_every_knob() -> None:
    from click.testing import CliRunner

    from tracekit.cli.app import cli

    out = CliRunner().invoke(cli, ["analyze", "--help"], terminal_width=400).output
    listed = re.search(r"Causes: (.*?) \(docs/critical-path\.md\)", " ".join(out.split()))
    assert listed is not None, out
    assert [n.strip() for n in listed.group(1).split(",")] == [k.name for k in KNOBS]


def test_docs_have_every_kind() -> None:
    analysis = (DOCS / "analysis.md").read_text(encoding="utf-8")
    report = (DOCS / "json-report.md").read_text(encoding="utf-8")
    path = (DOCS / "critical-path.md").read_text(encoding="utf-8")
    for n in IDLE_CAUSES:
        assert f"| `{n}` |" in analysis, n
    for c in BREAKDOWN:
        assert f"| `{c.name}` | {c.label} |" in report, c.name
    for f in FINDINGS:
        assert f"| `{f.name}` |" in report, f.name
    for p in PATH:
        assert f"| `{p.name}` |" in path, p.name
    for k in KNOBS:
        assert f"| `{k.name}` |" in path, k.name
    with_what_if = [f.name for f in FINDINGS if f.what_if is not None]
    table = path.split("<!-- generated:finding-what-if:start -->")[1].split("<!-- generated:finding-what-if:end -->")[0]
    for name in with_what_if:
        assert re.search(rf"\b{name}\b", table), name


def test_job_findings_use_the_registry() -> None:
    from tracekit.analysis.causes import JOB_FIXES, JOB_TITLES

    for f in FINDINGS:
        if f.job:
            assert JOB_TITLES[f.name] == f.title
            assert JOB_FIXES[f.name] == f.fix
    assert pl.Series(list(JOB_TITLES)).is_unique().all()



def test_gpu_time_two_causes_share_is_the_first_path_categorys(tmp_path: Path) -> None:
    # a communication kernel [10, 20) µs and a pageable copy [15, 30) µs, nothing else on the GPU:
    # the overlap is communication's (the critical path lists communication before copies)
    def gpu(name: str, cat: str, ts: float, dur: float, stream: int, corr: int) -> dict[str, object]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                "args": {"device": 0, "stream": stream, "correlation": corr}}

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 40.0},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 40.0, "dur": 40.0},
        gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 10.0, 10.0, 7, 1),
        gpu("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 15.0, 15.0, 8, 2),
    ]
    path = tmp_path / "overlap.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    per_step = diagnose(read_trace(path, cache=False)).timeline.per_step.filter(pl.col("step") == 1)
    assert per_step["busy_ns"].item() == 20_000
    assert per_step["compute_ns"].item() == 0
    # communication [10, 20), the copy only where it runs alone [20, 30) (not [15, 30))
    assert per_step["exposed_communication_ns"].item() == 10_000
    assert per_step["pageable_memcpy_ns"].item() == 10_000
    assert [c.name for c in causes.gpu_claimants()][:2] == ["exposed_communication", "pageable_memcpy"]


def test_registration_is_checked_and_undone() -> None:
    from tracekit.analysis.causes import ON_LIGHT, Cause, Knob, register, registered, unregister

    before = (list(CAUSES), list(IDLE_CAUSES), [k.name for k in KNOBS], causes.REGISTRY.version)
    extra = Cause("gc_pause", "garbage collection", "gc", "#123456", "#654321", ON_LIGHT, "collector pauses",
                  rule=causes.LongHostWork(), knobs=(Knob("gc_pause", frozenset({"cpu"}), "collector pauses"),))
    with registered(extra, before="unattributed"):
        assert list(CAUSES)[-2:] == ["gc_pause", "unattributed"]
        assert list(IDLE_CAUSES)[-3:] == ["cpu_bound", "gc_pause", "unattributed"]
        assert "gc_pause" in causes.WHAT_IF_CAUSES
        assert "gc_pause" in causes.knobs_markdown()
        with pytest.raises(ValueError, match="already registered"):
            register(extra)
    assert (list(CAUSES), list(IDLE_CAUSES), [k.name for k in KNOBS]) == before[:3]
    assert causes.REGISTRY.version > before[3], "every change is a new version of the derived tables"
    with pytest.raises(ValueError, match="no such entry"):
        register(extra, before="not_a_cause")
    with pytest.raises(ValueError, match="edge tag"):
        register(Cause("odd", "odd", "odd", "#010101", "#020202", ON_LIGHT, "odd", host_tag="no_such_tag",
                       detector=lambda h: h.host))
    with pytest.raises(ValueError, match="knob"):
        register(Cause("odd", "odd", "odd", "#010101", "#020202", ON_LIGHT, "odd", rule=causes.Untraced(),
                       knobs=(Knob("data_loading", frozenset({"cpu"}), "a knob that exists"),)))
    with pytest.raises(ValueError, match="not registered"):
        unregister("gc_pause")
    assert list(CAUSES) == before[0]


def test_live_views_read_the_registry_now() -> None:
    from tracekit.analysis.causes import LiveMapping, LiveSequence

    table = ["a", "b"]
    view = LiveSequence(lambda: tuple(table))
    assert list(view) == ["a", "b"]
    assert view == ("a", "b")
    assert "a" in view
    assert view[1] == "b"
    assert len(view) == 2
    table.append("c")
    assert list(view) == ["a", "b", "c"]
    assert view[-1] == "c"
    mapping = LiveMapping(lambda: {t: t.upper() for t in table})
    assert dict(mapping) == {"a": "A", "b": "B", "c": "C"}
    assert mapping.get("z") is None
    # a table is computed once per registry version
    calls: list[int] = []

    @causes.registry.derived
    def counted() -> int:
        calls.append(1)
        return len(calls)

    assert counted() == counted() == 1
    causes.REGISTRY.version += 1
    assert counted() == 2
