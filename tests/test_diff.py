"""tracekit diff: planted improvements in before/after synthetic pairs are reported exactly, on any
mix of Kineto and Nsight inputs; the JSON contract; --fail-if-slower for CI."""

from __future__ import annotations

import dataclasses
import json
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SAMPLE_TRACES, write_trace

import tracekit
from tracekit.analysis import Diagnosis, diagnose
from tracekit.analysis.compare import Change, DiffResult, compare
from tracekit.cli import main
from tracekit.report.diff import diff_to_json_dict, render_diff_markdown, render_diff_text

SYN = SAMPLE_TRACES / "synthetic"
MIXES = [("kineto.json", "kineto.json"), ("nsys.sqlite", "nsys.sqlite"), ("kineto.json", "nsys.sqlite"), ("nsys.sqlite", "kineto.json")]


@cache
def _diagnosis(name: str) -> Diagnosis:
    return diagnose(tracekit.read_trace(SYN / name, cache=False))


def _expected(stem: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((SYN / f"{stem}.expected.json").read_text(encoding="utf-8"))
    return data


def _expected_step_ms(stem: str) -> float:
    """Median step time of the ground truth."""
    steps = _expected(stem)["per_step"]
    assert isinstance(steps, list)
    return float(statistics.median(s["duration_ns"] for s in steps)) / 1e6


def _expected_idle_ms(stem: str, cause: str) -> float:
    e = _expected(stem)
    totals = e["totals"]
    assert isinstance(totals, dict)
    steps = e["per_step"]
    assert isinstance(steps, list)
    return float(totals["idle_by_cause"].get(cause, 0)) / len(steps) / 1e6


@pytest.mark.parametrize(("ext_before", "ext_after"), MIXES, ids=["kineto-kineto", "nsys-nsys", "kineto-nsys", "nsys-kineto"])
def test_dataloader_fix_is_reported(ext_before: str, ext_after: str) -> None:
    r = compare(_diagnosis(f"dataloader_stall.{ext_before}"), _diagnosis(f"dataloader_fixed.{ext_after}"))
    # planted: 38 ms per step saved, data loading 40 -> 2 ms per step
    assert r.step_ms.before == pytest.approx(_expected_step_ms("dataloader_stall"), abs=0.01)
    assert r.step_ms.after == pytest.approx(_expected_step_ms("dataloader_fixed"), abs=0.01)
    assert r.step_ms.delta == pytest.approx(-38.0, abs=0.01)
    assert r.step_ms.delta_pct == pytest.approx(-38.0 / r.step_ms.before * 100, rel=1e-9)
    assert r.verdict == "faster"
    causes = {c.cause: c for c in r.causes}
    assert causes["data_loading"].ms_per_step.before == pytest.approx(40.0, abs=0.01)
    assert causes["data_loading"].ms_per_step.after == pytest.approx(2.0, abs=0.01)
    assert causes["data_loading"].ms_per_step.delta == pytest.approx(-38.0, abs=0.01)
    assert causes["compute"].ms_per_step.delta == pytest.approx(0.0, abs=0.01)
    assert r.gpu_utilization.before == pytest.approx(0.6, abs=0.001)
    assert r.gpu_utilization.after == pytest.approx(_expected("dataloader_fixed")["totals"]["gpu_busy_fraction"], abs=0.001)  # type: ignore[index]
    by_kind = {f.kind: f for f in r.findings}
    assert set(by_kind) == {"data_loading", "host_device_sync"}
    finding = by_kind["data_loading"]
    assert finding.status == "fixed"
    # the loss.item() sync kept the host from loading the next batch while the GPU computed
    # (the replay prices removing it at the same 40 ms); with workers loading it costs nothing
    assert by_kind["host_device_sync"].status == "fixed"
    # below the reporting threshold after the fix, the cause's remaining cost is still shown
    assert finding.ms_per_step.after == pytest.approx(2.0, abs=0.01)
    assert not r.slower_than(0.0)
    # identical kernels on both sides
    assert r.kernels
    assert all(k.ms_per_step.delta == pytest.approx(0.0, abs=1e-6) for k in r.kernels)
    mixed = ext_before.split(".")[0] != ext_after.split(".")[0]
    assert any("Mixed inputs" in n for n in r.notes) == mixed


@pytest.mark.parametrize(("ext_before", "ext_after"), MIXES, ids=["kineto-kineto", "nsys-nsys", "kineto-nsys", "nsys-kineto"])
def test_host_sync_fix_is_reported(ext_before: str, ext_after: str) -> None:
    r = compare(_diagnosis(f"host_sync.{ext_before}"), _diagnosis(f"host_sync_fixed.{ext_after}"))
    assert r.step_ms.before == pytest.approx(_expected_step_ms("host_sync"), abs=0.01)
    assert r.step_ms.after == pytest.approx(_expected_step_ms("host_sync_fixed"), abs=0.01)
    causes = {c.cause: c for c in r.causes}
    assert causes["host_device_sync"].ms_per_step.before == pytest.approx(_expected_idle_ms("host_sync", "host_device_sync"), abs=0.01)
    assert causes["host_device_sync"].ms_per_step.after == pytest.approx(0.0, abs=0.01)
    assert r.verdict == "faster"
    statuses = {f.kind: f.status for f in r.findings}
    assert statuses == {"host_device_sync": "fixed"}
    assert r.gpu_utilization.after is not None
    assert r.gpu_utilization.after > 0.99


def test_reversed_pair_is_slower_and_findings_are_new() -> None:
    r = compare(_diagnosis("dataloader_fixed.kineto.json"), _diagnosis("dataloader_stall.nsys.sqlite"))
    assert r.verdict == "slower"
    assert r.step_ms.delta_pct == pytest.approx(100 * 38.0 / 62.0136, abs=0.05)
    # loading on the main thread, then loss.item(): removing either fix's cause saves the same
    assert sorted((f.kind, f.status) for f in r.findings) == [("data_loading", "new"), ("host_device_sync", "new")]
    assert r.slower_than(50.0)
    assert not r.slower_than(70.0)


def test_same_trace_is_unchanged() -> None:
    d = _diagnosis("host_sync.kineto.json")
    r = compare(d, d)
    assert r.verdict == "within_noise"
    assert r.step_ms.delta == 0.0
    assert r.step_ms.delta_pct == 0.0
    assert all(c.ms_per_step.delta == 0.0 for c in r.causes)
    assert [(f.kind, f.status) for f in r.findings] == [("host_device_sync", "unchanged")]
    assert r.notes == ()


def test_change_arithmetic() -> None:
    assert Change.of(100.0, 62.0) == Change(100.0, 62.0, -38.0, -38.0)
    assert Change.of(0.0, 5.0).delta_pct is None  # no relative change from zero
    assert Change.of(None, 5.0) == Change(None, 5.0, None, None)


def test_json_contract_keys() -> None:
    r = compare(_diagnosis("dataloader_stall.kineto.json"), _diagnosis("dataloader_fixed.kineto.json"))
    data = diff_to_json_dict(r)
    assert data["schema"] == "tracekit.diff/1"
    assert set(data["step_ms"]) >= {"before", "after", "delta_pct"}
    assert set(data["gpu_utilization"]) >= {"before", "after"}
    assert data["causes"]["data_loading"]["ms_per_step"]["before"] == pytest.approx(40.0, abs=0.01)
    assert data["causes"]["data_loading"]["ms_per_step"]["after"] == pytest.approx(2.0, abs=0.01)
    assert set(data["causes"]) == set(tracekit.analysis.CAUSES)
    assert data["findings"][0]["status"] == "fixed"
    json.dumps(data)  # serialisable as is


def test_text_and_markdown_show_the_improvement() -> None:
    r = compare(_diagnosis("dataloader_stall.kineto.json"), _diagnosis("dataloader_fixed.nsys.sqlite"))
    text = render_diff_text(r)
    assert text.startswith("tracekit diff · faster: -38.00 ms per step (-38.0%)")
    assert "  data loading                    40.00         2.00  -38.00" in text
    assert "fixed      The GPU waits for the DataLoader [data_loading]: 40.00 -> 2.00 (-38.00)" in text
    md = render_diff_markdown(r)
    assert md.startswith("## tracekit diff: faster")
    assert "| data loading | 40.00 | 2.00 | -38.00 |" in md
    assert "| **fixed** | The GPU waits for the DataLoader (`data_loading`)" in md


def _run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(REPO)
    code = main(["diff", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_and_exit_codes(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    stall, fixed = "sample_traces/synthetic/dataloader_stall.kineto.json", "sample_traces/synthetic/dataloader_fixed.nsys.sqlite"
    code, out, err = _run(capsys, monkeypatch, stall, fixed, "--format", "json", "--fail-if-slower", "0")
    assert code == 0, err
    data = json.loads(out)
    assert data["step_ms"]["delta_pct"] == pytest.approx(-38.0, abs=0.1)
    assert data["before"]["format"] == "kineto"
    assert data["after"]["format"] == "nsys"
    # the other way round it is 61% slower
    code, out, err = _run(capsys, monkeypatch, fixed, stall, "--fail-if-slower", "5")
    assert code == 1
    assert err.strip().splitlines() == [err.strip()]  # one line
    assert err.startswith("tracekit: slower: median step time 62.01 ms -> 100.01 ms (+61.3%)")
    assert "tracekit diff · slower" in out  # the report is still printed
    code, _, _ = _run(capsys, monkeypatch, fixed, stall, "--fail-if-slower", "70")
    assert code == 0


def test_cli_writes_markdown_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    out_file = tmp_path / "diff.md"
    code, out, err = _run(capsys, monkeypatch, "sample_traces/synthetic/host_sync.kineto.json",
                          "sample_traces/synthetic/host_sync_fixed.kineto.json", "-f", "markdown", "-o", str(out_file))
    assert code == 0
    assert out == ""
    assert f"wrote {out_file}" in err
    assert "| **fixed** | Host-device synchronisation stalls the GPU" in out_file.read_text(encoding="utf-8")


def test_cli_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    good = "sample_traces/synthetic/healthy.kineto.json"
    code, _, err = _run(capsys, monkeypatch, good, str(tmp_path / "missing.json"))
    assert code == 3
    assert "missing.json" in err
    assert "Traceback" not in err
    code, _, err = _run(capsys, monkeypatch, good, good, "--fail-if-slower", "-1")
    assert code == 2
    # a CPU-only trace can be compared: no utilization, and the report says why
    cpu_only = write_trace(tmp_path / "cpu_only.json", [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
    ])
    code, out, err = _run(capsys, monkeypatch, good, str(cpu_only))
    assert code == 0
    assert "The after trace has no GPU activity" in out


def test_fail_if_slower_needs_step_times(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a complete step there is no step time: --fail-if-slower refuses (exit 6) rather than pass."""
    real = tracekit.analysis.diagnose

    def no_steps(tables: tracekit.TraceTables, **kw: Any) -> Diagnosis:
        d = real(tables, **kw)
        if "fixed" in tables.info.path:
            d = dataclasses.replace(d, steps=d.steps.with_columns(complete=False), step_ms_median=None, step_ms_mean=None)
        return d

    monkeypatch.setattr(tracekit.analysis, "diagnose", no_steps)
    before, after = "sample_traces/synthetic/host_sync.kineto.json", "sample_traces/synthetic/host_sync_fixed.kineto.json"
    code, out, _ = _run(capsys, monkeypatch, before, after)
    assert code == 0
    assert "step times cannot be compared" in out
    assert "The after trace has no complete step" in out
    code, _, err = _run(capsys, monkeypatch, before, after, "--fail-if-slower", "5")
    assert code == 6
    assert "host_sync_fixed.kineto.json" in err
    assert "no complete step" in err


def test_result_is_frozen() -> None:
    r = compare(_diagnosis("healthy.kineto.json"), _diagnosis("healthy.nsys.sqlite"))
    assert isinstance(r, DiffResult)
    with pytest.raises(AttributeError):
        r.verdict = "slower"  # type: ignore[misc]


# --------------------------------------------------------------------------- efficiency: MFU and the busy findings


def _scenario(tmp_path: Path, name: str, ops: list[object], **kw: object) -> Diagnosis:
    import efficiency_scenarios as sc

    path = sc.write(tmp_path / f"{name}.json", ops, **kw)  # type: ignore[arg-type]
    return diagnose(tracekit.read_trace(path, cache=False))


def test_mixed_precision_shows_mfu_and_the_fixed_fp32_gemms(tmp_path: Path) -> None:
    """fp32 → bf16 on an H100: the scenario fixes every number (4 GEMMs of 2·8192·4096·4096 FLOPs per
    step; steps of 27,330 us before and 1,690 us after; peaks 67 and 989.4 TFLOP/s)."""
    import efficiency_scenarios as sc

    from tracekit.report.diff import render_diff_html

    r = compare(_scenario(tmp_path, "fp32", sc.fp32_gemms()), _scenario(tmp_path, "bf16", sc.healthy_bf16()))
    flops = 4 * 2 * 8192 * 4096 * 4096
    step_b, step_a = 27_330e-6, 1_690e-6
    e = r.efficiency
    assert e.mfu.before == pytest.approx(flops / step_b / 67.0e12, rel=1e-9)
    assert e.mfu.after == pytest.approx(flops / step_a / 989.4e12, rel=1e-9)
    assert e.mfu.delta == pytest.approx(e.mfu.after - e.mfu.before, rel=1e-12)  # type: ignore[operator]
    assert e.model_tflops.before == pytest.approx(flops / step_b / 1e12, rel=1e-9)
    assert e.model_tflops.after == pytest.approx(flops / step_a / 1e12, rel=1e-9)
    assert (e.mfu_dtype_before, e.mfu_dtype_after, e.peak_tflops_before, e.peak_tflops_after) == ("fp32", "bf16", 67.0, 989.4)
    assert e.reason is None
    assert e.caveat is not None
    assert "fp32 67 TFLOP/s before, bf16 989.4 TFLOP/s after" in e.caveat
    fp32 = next(f for f in r.findings if f.kind == "fp32_gemm")
    assert fp32.status == "fixed"
    assert fp32.ms_per_step.before == pytest.approx(4 * 6.8 * (1 - 67.0 / 989.4))
    assert fp32.ms_per_step.after == 0.0  # measured after, and none left

    text = render_diff_text(r)
    mfu_b, mfu_a = f"{100 * e.mfu.before:.1f}% fp32", f"{100 * e.mfu.after:.1f}% bf16"  # type: ignore[operator]
    assert f"  MFU                      {mfu_b:>12} {mfu_a:>12}  {100 * e.mfu.delta:+.1f} pts" in text  # type: ignore[operator]
    assert "  model TFLOP/s" in text
    assert e.caveat in text
    assert "fixed      Matrix multiplies run in fp32 on a GPU with much faster bf16/TF32 units [fp32_gemm]" in text
    md = render_diff_markdown(r)
    assert f"| MFU | {mfu_b} | {mfu_a} | {100 * e.mfu.delta:+.1f} pts |" in md  # type: ignore[operator]
    assert f"- {e.caveat}" in md
    html = render_diff_html(r)
    assert f'<td>MFU</td><td class="n">{mfu_b}</td>' in html
    assert "different peaks" in html
    data = diff_to_json_dict(r)
    assert data["mfu"]["before"] == round(e.mfu.before, 4)  # type: ignore[arg-type]
    assert data["mfu"]["after"] == round(e.mfu.after, 4)  # type: ignore[arg-type]
    assert data["mfu"]["dtype"] == {"before": "fp32", "after": "bf16"}
    assert data["mfu"]["peak_tflops"] == {"before": 67.0, "after": 989.4}
    assert data["mfu"]["reason"] is None
    assert data["model_tflops"]["after"] == round(flops / step_a / 1e12, 4)
    assert next(f for f in data["findings"] if f["kind"] == "fp32_gemm")["status"] == "fixed"


def test_a_side_without_shapes_says_why_and_counts_nothing_as_fixed(tmp_path: Path) -> None:
    import efficiency_scenarios as sc

    from tracekit.report.diff import render_diff_html

    shapes = _scenario(tmp_path, "chain", sc.unfused_chain())
    bare = _scenario(tmp_path, "bare", sc.unfused_chain(), shapes=False)
    why = "no operator shapes in the trace (capture with record_shapes=True)"
    for before, after, side, status_if_measured in ((shapes, bare, "after", "fixed"), (bare, shapes, "before", "new")):
        r = compare(before, after)
        e = r.efficiency
        assert e.mfu.delta is None
        assert e.reason == f"{side}: {why}"
        chain = next(f for f in r.findings if f.kind == "unfused_elementwise")
        assert chain.status == "not_measured", status_if_measured
        assert getattr(chain.ms_per_step, side) is None
        assert f"MFU n/a: {side}: {why}" in render_diff_text(r)
        assert f"- MFU n/a: {side}: {why}" in render_diff_markdown(r)
        assert f"MFU n/a: {side}: {why}" in render_diff_html(r)
        assert "not measured Chains of memory-bound elementwise kernels" in render_diff_text(r)
        data = diff_to_json_dict(r)
        assert data["mfu"]["reason"] == f"{side}: {why}"
        assert data["mfu"]["delta"] is None
        assert next(f for f in data["findings"] if f["kind"] == "unfused_elementwise")["status"] == "not_measured"
    # the same shapes on both sides: the chain is measured twice and unchanged
    r = compare(shapes, _scenario(tmp_path, "chain2", sc.unfused_chain()))
    assert next(f for f in r.findings if f.kind == "unfused_elementwise").status == "unchanged"
    assert r.efficiency.mfu.delta == pytest.approx(0.0, abs=1e-12)
    # neither side has shapes: one reason for both
    assert compare(bare, bare).efficiency.reason == f"both traces: {why}"


def test_fp32_matrix_math_judged_two_ways_is_neither_fixed_nor_new(tmp_path: Path) -> None:
    """Without shapes fp32 GEMMs are found from kernel names (no_tensor_cores); with shapes from
    the dtypes (fp32_gemm), which replaces it: the same work on both sides is not a fix."""
    import efficiency_scenarios as sc

    r = compare(_scenario(tmp_path, "bare", sc.fp32_gemms(), shapes=False), _scenario(tmp_path, "fp32", sc.fp32_gemms()))
    status = {f.kind: f.status for f in r.findings}
    assert status["no_tensor_cores"] == "not_measured"
    assert status["fp32_gemm"] == "not_measured"
    assert any("the same cause measured two ways" in n for n in r.notes)


@pytest.mark.parametrize(("made", "via"), [("data_loading", {}), ("host_device_sync", {"data_loading": "host_device_sync"})])
def test_diff_names_the_plan_step_the_change_made(tmp_path: Path, made: str, via: dict[str, str]) -> None:
    """A simulated loop before and after one fix: the diff names BEFORE's plan step it made
    (directly, or by its alternative) and compares its prediction with AFTER's step."""
    from loopsim import PLANS, apply_fixes, simulate, write_kineto

    from tracekit.analysis import diagnose
    from tracekit.analysis.compare import compare

    loop, _ = PLANS["sync_loader"]
    before = diagnose(tracekit.read_trace(write_kineto(simulate(loop), tmp_path / "before.json"), cache=False))
    after = diagnose(tracekit.read_trace(write_kineto(simulate(apply_fixes(loop, made)), tmp_path / "after.json"), cache=False))
    check = compare(before, after).plan
    assert check is not None
    assert (check.step, check.kinds, check.via) == (1, ("data_loading",), via)
    assert check.predicted_ms == pytest.approx(before.plan.steps[0].predicted_step_ms)
    assert check.measured_ms == pytest.approx(after.step_ms_median)
    assert abs(check.error_pct) < 10.0
    assert check.sentence().startswith("The change matches step 1 of the before plan")
