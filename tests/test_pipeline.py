"""The one pipeline (tracekit.pipeline) and the one renderer table (tracekit.report.render): what a
path loads as, what running it returns, the progress it reports, and that every front end goes
through them (the only module outside the analyses that diagnoses is the pipeline)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, SAMPLE_TRACES, ProgressRecorder, jobs_folder, shared_trace

from tracekit import pipeline
from tracekit.errors import TraceFormatError, UsageError
from tracekit.progress import Progress
from tracekit.report import (
    FORMATS,
    document,
    format_for,
    render,
    render_html,
    render_job_text,
    render_markdown,
    to_json_dict,
)
from tracekit.report.diff import render_diff_text

SYN = SAMPLE_TRACES / "synthetic"
STALL = SYN / "dataloader_stall.kineto.json"
FIXED = SYN / "dataloader_fixed.kineto.json"
DDP = SAMPLE_TRACES / "captures" / "ddp_gloo"


# --------------------------------------------------------------------------- load


def test_load_names_what_a_path_holds(tmp_path: Path) -> None:
    trace = pipeline.load(STALL, cache=False)
    assert isinstance(trace, pipeline.TraceInput)
    assert trace.source == str(STALL)
    assert trace.tables.events.height == 602
    job = pipeline.load(DDP, cache=False)
    assert isinstance(job, pipeline.JobInput)
    assert job.source == str(DDP)
    assert job.job.rank_numbers == (0, 1)
    files = pipeline.load([SYN / "multi_rank.rank0.kineto.json", SYN / "multi_rank.rank1.kineto.json"], cache=False)
    assert isinstance(files, pipeline.JobInput)
    assert files.job.rank_numbers == (0, 1)
    folder = pipeline.load(jobs_folder(tmp_path), cache=False)
    assert isinstance(folder, pipeline.FolderInput)
    assert [len(j.ranks) for j in folder.jobs] == [1, 1, 2]
    assert folder.skipped == ()


def test_a_folder_of_one_job_loads_as_that_job(tmp_path: Path) -> None:
    """The one rule for a folder: rank files of one job (no metadata.json) are that job, not a folder of jobs."""
    folder = tmp_path / "run"
    folder.mkdir()
    for r in (0, 1):
        shutil.copy(SYN / f"multi_rank.rank{r}.kineto.json", folder / f"rank{r}.pt.trace.json")
    (folder / "notes.json").write_text("{}")  # not a trace: skipped, and said so
    loaded = pipeline.load(folder, cache=False)
    assert isinstance(loaded, pipeline.JobInput)
    assert loaded.job.rank_numbers == (0, 1)
    assert [Path(p).name for p, _ in loaded.job.skipped] == ["notes.json"]


def test_load_errors_name_the_input(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="expects a trace path"):
        pipeline.load(42)  # type: ignore[arg-type]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceFormatError, match="no trace files") as missing:
        pipeline.load(empty)
    assert str(empty) in missing.value.render()


def test_load_trace_tells_the_progress_its_subject() -> None:
    rec = ProgressRecorder()
    pipeline.load_trace(STALL, cache=False, progress=Progress(on_update=rec))
    assert {s.subject for s in rec.states} == {STALL.name}
    rec = ProgressRecorder()
    pipeline.load_trace(STALL, cache=False, progress=Progress(on_update=rec), subject="before: x")
    assert {s.subject for s in rec.states} == {"before: x"}


# --------------------------------------------------------------------------- run


def test_run_a_trace_with_its_phases_and_what_ifs() -> None:
    rec = ProgressRecorder()
    progress = Progress(on_update=rec)
    r = pipeline.run(pipeline.load(STALL, cache=False, progress=progress), what_ifs=[{"data_loading": 0.0}], progress=progress)
    assert isinstance(r, pipeline.TraceResult)
    assert rec.phases() == ["reading", "decoding", "steps", "idle time", "findings", "critical path", "replay", "plan"]
    assert [f.kind for f in r.diagnosis.findings] == ["data_loading", "host_device_sync"]
    assert [a.what_if.label for a in r.diagnosis.what_ifs] == ["data_loading=0"]
    assert r.path == str(STALL)


def test_the_view_is_the_reports_and_built_once() -> None:
    r = pipeline.run(pipeline.load(STALL, cache=False))
    view = r.view()
    assert view is not None
    assert r.view() is view  # computed once, on demand
    assert (view.rank, view.step) == r.representative_step()
    assert r.view(0, view.step) is view
    other = r.view(0, 2)
    assert other is not None
    assert other.step == 2
    assert r.step_view(0, 2).events.equals(other.events)
    assert r.step_view(0, 2, max_events=5).events.height == 5  # the terminal UI draws more, the reports fewer
    with pytest.raises(UsageError, match="no step 99 on rank 0"):
        r.view(0, 99)
    with pytest.raises(KeyError):
        r.step_view(0, 99)


def test_run_a_job_reports_its_ranks() -> None:
    rec = ProgressRecorder()
    seen: list[tuple[int, int]] = []
    job = pipeline.run(pipeline.load(DDP, cache=False), progress=Progress(on_update=rec), on_rank=lambda i, r: seen.append((i, r.rank)))
    assert isinstance(job, pipeline.JobResult)
    assert seen == [(0, 0), (1, 1)]
    assert rec.phases() == ["analyzing 2 ranks"]
    assert {s.subject for s in rec.states} == {"ddp_gloo"}
    assert sorted(job.ranks) == [0, 1]
    assert job.ranks[1].diagnosis is job.job_diagnosis.diagnoses[1]
    assert job.view() is job.ranks[0].view()


def test_what_if_is_for_one_trace(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="one trace"):
        pipeline.run(pipeline.load(DDP, cache=False), what_ifs=[{"data_loading": 0.0}])
    with pytest.raises(UsageError, match="one trace"):
        pipeline.run(pipeline.load(jobs_folder(tmp_path), cache=False), what_ifs=[{"data_loading": 0.0}])


def test_run_a_folder_of_jobs(tmp_path: Path) -> None:
    folder = jobs_folder(tmp_path)
    r = pipeline.run(pipeline.load(folder, cache=False))
    assert isinstance(r, pipeline.FolderResult)
    assert r.folder == str(folder)
    assert [j.source for j in r.jobs] == [j.job.name for j in r.jobs]
    assert [len(jd.diagnoses) for jd in r.job_diagnoses] == [1, 1, 2]


def test_split_ranks_of_a_single_rank_file_is_the_file() -> None:
    r = pipeline.run(pipeline.load_trace(STALL, cache=False))
    split = r.split_ranks()
    assert split.ranks == (0,)
    assert split.diagnoses[0] is r.diagnosis
    assert [p.source for p in split.profiles] == [str(STALL)]


def test_split_ranks_diagnoses_each_process_of_a_file() -> None:
    r = pipeline.run(pipeline.load_trace(shared_trace("nsight/nsys-ai/h100_2gpu_1s.sqlite"), cache=False))
    split = r.split_ranks()
    assert split.ranks == (0, 1)
    assert sorted(split.diagnoses) == [0, 1]
    assert all(d is not r.diagnosis for d in split.diagnoses.values())
    assert sorted({p.rank for p in split.profiles}) == [0, 1]


def test_compare_files_reports_both_sides() -> None:
    rec = ProgressRecorder()
    c = pipeline.compare_files(STALL, FIXED, cache=False, progress=Progress(on_update=rec))
    assert c.diff.verdict == "faster"
    assert (c.before.path, c.after.path) == (str(STALL), str(FIXED))
    subjects = list(dict.fromkeys(s.subject for s in rec.states))
    assert subjects == [f"before: {STALL.name}", f"after: {FIXED.name}", None]
    again = pipeline.compare(c.before, c.after)
    assert render(again, "json") == render(c, "json")


# --------------------------------------------------------------------------- the renderer table


def test_every_result_renders_in_every_format(tmp_path: Path) -> None:
    trace = pipeline.run(pipeline.load(STALL, cache=False))
    job = pipeline.run(pipeline.load(DDP, cache=False))
    folder = pipeline.run(pipeline.load(jobs_folder(tmp_path), cache=False))
    comparison = pipeline.compare_files(STALL, FIXED, cache=False)
    for result in (trace, job, folder, comparison):
        for fmt in FORMATS:
            text = render(result, fmt)
            assert text, (type(result).__name__, fmt)
        assert json.loads(render(result, "json")) == document(result)
        assert render(result, "fragment").startswith('<div class="tracekit-report">')
    # the table hands each result to the renderer of its kind, unchanged
    assert render(trace, "html") == render_html(trace.diagnosis, trace.view())
    assert render(trace, "markdown", image="shot.png") == render_markdown(trace.diagnosis, view=trace.view(), image="shot.png")
    assert document(trace) == to_json_dict(trace.diagnosis)
    assert render(job, "text") == render_job_text(job.job_diagnosis)
    assert render(comparison) == render_diff_text(comparison.diff)
    # an option only some renderers take is left out for the others
    assert render(job, "markdown", image="shot.png") == render(job, "markdown")
    assert "shot.png" not in render(trace, "html", image="shot.png")


def test_render_refuses_what_it_cannot_draw() -> None:
    trace = pipeline.run(pipeline.load(STALL, cache=False))
    with pytest.raises(UsageError, match="no 'pdf' rendering of a TraceResult") as bad:
        render(trace, "pdf")
    assert "formats: text, json, markdown, html, fragment" in bad.value.render()
    with pytest.raises(UsageError, match="no 'text' rendering of a dict"):
        render({}, "text")
    with pytest.raises(UsageError, match="no JSON document"):
        document(object())
    with pytest.raises(TypeError, match="no option 'imgae'"):
        render(trace, "markdown", imgae="x")


def test_format_for_a_suffix() -> None:
    assert [format_for(n) for n in ("r.html", "r.HTM", "r.json", "r.md", "r.txt", "report")] == [
        "html", "html", "json", "markdown", "text", "text",
    ]


# --------------------------------------------------------------------------- every front end on it


def _calls(tree: ast.AST, names: set[str]) -> list[int]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in names:
                out.append(node.lineno)
    return out


def test_only_the_pipeline_diagnoses_outside_the_analyses() -> None:
    diagnosing = {"diagnose", "diagnose_job", "diagnose_ranks"}
    callers = {}
    for path in sorted((REPO / "tracekit").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("tracekit/analysis/"):
            continue
        lines = _calls(ast.parse(path.read_text(encoding="utf-8")), diagnosing)
        if lines:
            callers[rel] = lines
    assert list(callers) == ["tracekit/pipeline.py"], callers


def test_the_front_ends_pick_no_renderer_by_format() -> None:
    """Output formats come from the renderer table: no front end compares a format name itself."""
    fronts = [REPO / "tracekit" / "api.py", *sorted((REPO / "tracekit" / "cli").glob("*.py"))]
    for path in fronts:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "fmt":
                pytest.fail(f"{path.relative_to(REPO)}:{node.lineno} picks a rendering by format")
