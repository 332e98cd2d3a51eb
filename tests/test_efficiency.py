"""Roofline, MFU and the efficiency findings on traces with known shapes, times and device."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import tracekit
from tracekit.analysis import diagnose
from tracekit.analysis.peaks import device_peaks

from . import efficiency_scenarios as sc
from .conftest import shared_trace

H100_BF16 = 989.4e12
H100_FP32 = 67.0e12


def _diagnose(tmp_path: Path, ops: list[sc.Op], **kw: object) -> tracekit.analysis.Diagnosis:
    path = sc.write(tmp_path / "t.json", ops, **kw)  # type: ignore[arg-type]
    return diagnose(tracekit.read_trace(path, cache=False))


def test_device_peaks_by_trace_name() -> None:
    h100 = device_peaks("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    assert (h100.model, h100.tflops("bf16"), h100.tflops("fp32"), h100.memory_gbps) == ("H100 SXM", 989.4, 67.0, 3350.0)
    pcie = device_peaks("NVIDIA H100 PCIe")
    assert pcie is not None
    assert pcie.model == "H100 PCIe"
    a100 = device_peaks("NVIDIA A100-SXM4-80GB")
    assert a100 is not None
    assert (a100.model, a100.memory_gbps) == ("A100 80GB SXM", 2039.0)
    mi300 = device_peaks("AMD Instinct MI300X VF")
    assert mi300 is not None
    assert mi300.model == "Instinct MI300X"
    v100 = device_peaks("Tesla V100-SXM2-32GB")
    assert v100 is not None
    assert v100.tflops("tf32") is None
    # unknown devices are unknown, never matched to something close
    for name in ("Quadro GP100", "AMD Radeon Graphics", "NVIDIA PG509-210", "", None):
        assert device_peaks(name) is None


def test_healthy_bf16_gives_exact_mfu_and_no_efficiency_findings(tmp_path: Path) -> None:
    ops = sc.healthy_bf16()
    d = _diagnose(tmp_path, ops)
    eff = d.efficiency
    assert eff.available
    assert eff.mfu_dtype == "bf16"
    assert eff.peak_tflops == 989.4
    step_ns = (20 * len(ops) + sum(o.kernel_us for o in ops) + 50) * 1000
    flops_per_step = 4 * 2 * 8192 * 4096 * 4096
    assert eff.mfu == pytest.approx(flops_per_step / (step_ns * 1e-9 * H100_BF16), rel=1e-12)
    assert (eff.per_step["mfu"] - flops_per_step / (step_ns * 1e-9 * H100_BF16)).abs().max() < 1e-12  # type: ignore[operator]
    gemm = eff.by_class.filter(pl.col("op_class") == "gemm").row(0, named=True)
    assert gemm["tflops"] == pytest.approx(2 * 8192 * 4096 * 4096 / 370e-6 / 1e12, rel=1e-12)
    assert gemm["bound"] == "compute"
    assert gemm["pct_of_attainable"] == pytest.approx(2 * 8192 * 4096 * 4096 / 370e-6 / H100_BF16, rel=1e-9)
    assert sum(eff.split.values()) == pytest.approx(1.0)
    kinds = {f.kind for f in d.findings}
    assert not kinds & {"fp32_gemm", "small_gemm", "unfused_elementwise", "no_tensor_cores"}


def test_fp32_gemms_are_found_and_priced_from_the_peak_ratio(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, sc.fp32_gemms())
    kinds = [f.kind for f in d.findings]
    assert "fp32_gemm" in kinds
    # the kernel-name finding is the same cause: only the dtype-based one is kept
    assert "no_tensor_cores" not in kinds
    f = next(f for f in d.findings if f.kind == "fp32_gemm")
    fp32_ms = 4 * 6.8
    assert f.evidence["fp32_ms_per_step"] == pytest.approx(fp32_ms)
    assert f.evidence["saving_ms_per_step"]["bf16"] == pytest.approx(round(fp32_ms * (1 - 67.0 / 989.4), 3))
    assert f.evidence["saving_ms_per_step"]["tf32"] == pytest.approx(round(fp32_ms * (1 - 67.0 / 494.7), 3))
    assert f.ms_per_step == pytest.approx(fp32_ms * (1 - 67.0 / 989.4))
    assert f.evidence["ops"][0]["shape"] == "M=8192 N=4096 K=4096"
    assert f.predicted_step_ms is not None
    assert f.predicted_step_ms < d.step_ms_median  # type: ignore[operator]
    assert d.efficiency.mfu_dtype == "fp32"
    assert d.efficiency.peak_tflops == 67.0


def test_small_gemms_are_found_with_their_tiles(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, sc.small_gemms())
    kinds = [f.kind for f in d.findings]
    assert "small_gemm" in kinds
    assert "fp32_gemm" not in kinds
    f = next(f for f in d.findings if f.kind == "small_gemm")
    top = f.evidence["ops"][0]
    assert (top["shape"], top["calls"], top["tiles"]) == ("M=32 N=1024 K=1024", 40 * 4, 8)
    assert f.evidence["sm_count"] == 132
    # the big GEMM of the same step is not small
    assert all("8192" not in o["shape"] for o in f.evidence["ops"])


def test_unfused_elementwise_chain_is_priced_as_all_but_its_longest_op(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, sc.unfused_chain())
    f = next(f for f in d.findings if f.kind == "unfused_elementwise")
    assert f.ms_per_step == pytest.approx(3 * 0.120)
    assert f.evidence["ops_per_chain"] == 4
    assert f.evidence["chains"][0]["ops"] == "aten::mul → aten::add → aten::mul → aten::add"
    ew = d.efficiency.by_class.filter(pl.col("op_class") == "elementwise").row(0, named=True)
    assert ew["bound"] == "memory"
    assert ew["gbps"] == pytest.approx(3 * 8192 * 4096 * 2 / 120e-6 / 1e9, rel=1e-12)


def test_no_shapes_says_how_to_get_them(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, sc.healthy_bf16(), shapes=False)
    assert not d.efficiency.available
    assert d.efficiency.mfu is None
    assert "record_shapes=True" in d.efficiency.headline
    assert d.efficiency.headline.startswith("MFU n/a")


def test_unknown_device_keeps_rates_but_no_mfu(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, sc.healthy_bf16(), device="Imaginary Accelerator 9000")
    eff = d.efficiency
    assert eff.available
    assert eff.mfu is None
    assert eff.reason is not None
    assert "Imaginary Accelerator 9000" in eff.reason
    assert "not in the peak table" in eff.reason
    assert eff.by_class.filter(pl.col("op_class") == "gemm")["tflops"][0] > 0


# --- the shared TraceLens traces: the same models on H100 and MI300X -------------------------

MODELS = (
    "Qwen_Qwen1.5-0.5B-Chat__1016005",
    "gaunernst_bert-small-uncased__1016001",
    "Falconsai_nsfw_image_detection__1016002",
)


@pytest.mark.parametrize("model", MODELS)
def test_tracelens_gemm_rates_agree_within_the_peaks(model: str) -> None:
    """The same GEMM shapes run on both GPUs; each reaches a share of its own peak, and the
    ratio of achieved TFLOP/s is bounded by the ratio of the peaks (within 2x either way)."""
    out = {}
    for gpu in ("h100", "mi300"):
        tables = tracekit.read_trace(shared_trace(f"tracelens/{gpu}/{model}.json.gz"), cache=False)
        eff = diagnose(tables).efficiency
        assert eff.available
        assert eff.peaks is not None
        assert eff.mfu is not None
        assert 0 < eff.mfu < 1
        gemm = eff.by_class.filter(pl.col("op_class") == "gemm").row(0, named=True)
        out[gpu] = (gemm["flops"], gemm["tflops"], eff.peaks.tflops(eff.mfu_dtype or "bf16"))
    (f_h, t_h, p_h), (f_m, t_m, p_m) = out["h100"], out["mi300"]
    assert f_h == f_m  # the same model and inputs: the same GEMM FLOPs
    assert t_h < p_h
    assert t_m < p_m
    assert 0.5 * min(1.0, p_m / p_h) <= t_m / t_h <= 2.0 * max(1.0, p_m / p_h)


def test_reports_show_mfu_roofline_and_efficiency(tmp_path: Path) -> None:
    from tracekit.report import render_html, render_markdown, render_text, to_json_dict

    d = _diagnose(tmp_path, sc.small_gemms())
    mfu = d.efficiency.mfu
    assert mfu is not None
    text = render_text(d)
    assert f"MFU {mfu:.1%} of the bf16 peak (989.4 TFLOP/s, H100 SXM)" in text
    assert "How well the busy time is used: roofline on H100 SXM" in text
    assert "M=32 N=1024 K=1024" in text
    md = render_markdown(d)
    assert "### How well the busy time is used (roofline)" in md
    html = render_html(d)
    assert 'aria-label="Roofline (bf16 peak 989.4 TFLOP/s, 3350 GB/s)"' in html
    data = to_json_dict(d)
    assert data["summary"]["mfu"] == round(mfu, 4)
    assert data["summary"]["mfu_dtype"] == "bf16"
    eff = data["efficiency"]
    assert eff["device"]["model"] == "H100 SXM"
    assert {c["op_class"] for c in eff["by_class"]} == {"gemm"}
    assert sum(eff["split"].values()) == pytest.approx(1.0, abs=1e-3)
    assert len(eff["steps"]) == 4


def test_export_writes_the_efficiency_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tracekit.analysis.efficiency import OP_EFFICIENCY
    from tracekit.cli import main

    path = sc.write(tmp_path / "t.json", sc.unfused_chain())
    assert main(["export", str(path), "--out", str(tmp_path / "out"), "--no-cache"]) == 0
    table = pl.read_parquet(tmp_path / "out" / "efficiency.parquet")
    assert table.columns == OP_EFFICIENCY.names
    gemm = table.filter(pl.col("op_class") == "gemm").row(0, named=True)
    assert (gemm["calls"], gemm["flops"], gemm["gpu_ns"]) == (4, 4 * 2 * 8192 * 4096 * 4096, 4 * 370_000)
    bare = sc.write(tmp_path / "bare.json", sc.unfused_chain(), shapes=False)
    assert main(["export", str(bare), "--out", str(tmp_path / "bare"), "--no-cache"]) == 0
    assert not (tmp_path / "bare" / "efficiency.parquet").exists()
    assert "record_shapes=True" in capsys.readouterr().err


# --- MFU and the roofline where shapes are recorded, the reason where not ---------------------
# Every shared trace is checked by tests/test_analysis.py::test_every_real_trace_analyses (one
# diagnosis per trace, its text report through check_mfu_text); here the command end to end on two.


@pytest.mark.shared
@pytest.mark.parametrize("rel", ["tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", "param/resnet_kineto.json.gz"])
def test_analyze_prints_mfu_and_the_roofline_or_why_not(rel: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`tracekit analyze` on a trace with shapes prints MFU (a number on a known GPU) and the
    roofline summary; on a trace without shapes it says how to get them."""
    from test_analysis import check_mfu_text

    from tracekit.cli import main

    path = shared_trace(rel)
    tables = tracekit.read_trace(path)  # fills the (per-test) cache the command reads
    assert main(["analyze", str(path), "--format", "text"]) == 0
    check_mfu_text(rel, tables.events, capsys.readouterr().out)

# --- MFU that cannot be measured is n/a everywhere, never 0.0% -----------------------------


def _every_rendering(tmp_path: Path, path: Path) -> dict[str, str]:
    """What each front end shows of a trace: text, Markdown, HTML, the notebook object's repr and
    HTML, the TUI's overview header."""
    from tracekit.api import TraceReport
    from tracekit.report.html import render_html
    from tracekit.report.text import render_markdown, render_text
    from tracekit.tui.screens.overview import summary_text
    from tracekit.tui.session import InputKind

    report = tracekit.analyze(path, cache=False)
    assert isinstance(report, TraceReport)
    d = report.diagnosis
    return {
        "text": render_text(d),
        "markdown": render_markdown(d),
        "html": render_html(d),
        "notebook": repr(report) + report._repr_html_(),
        "tui": str(summary_text(str(path), InputKind.TRACE, d, "").plain),
    }


def test_matrix_shapes_only_outside_the_counted_steps_give_mfu_na(tmp_path: Path) -> None:
    """Shapes recorded only on a step after the last ProfilerStep (not counted): the counted steps
    have no model FLOPs, so MFU and the model FLOP rate are unknown, not 0.0%."""
    path = sc.write(tmp_path / "t.json", sc.healthy_bf16(), steps=5, shaped_steps={4}, marked_steps=4)
    d = diagnose(tracekit.read_trace(path, cache=False))
    eff = d.efficiency
    assert d.complete_steps == 4
    assert eff.available
    assert eff.mfu_dtype == "bf16"
    assert eff.mfu is None
    assert eff.achieved_tflops is None
    why = "no GEMM, convolution or attention operator with recorded shapes ran in the counted steps"
    assert eff.reason == why
    assert eff.headline == f"MFU n/a: {why}"
    assert eff.per_step["mfu"].null_count() == eff.per_step.height
    from tracekit.report.json_report import to_json_dict

    data = to_json_dict(d)
    assert (data["summary"]["mfu"], data["summary"]["mfu_note"]) == (None, f"MFU n/a: {why}")
    assert (data["efficiency"]["mfu"], data["efficiency"]["reason"], data["efficiency"]["achieved_tflops"]) == (None, why, None)
    assert all(s["mfu"] is None for s in data["efficiency"]["steps"])
    shown = _every_rendering(tmp_path, path)
    for where, out in shown.items():
        assert "MFU 0.0%" not in out, where
        assert ">0.0%<" not in out, where
        assert "TFLOP/s achieved" not in out, where
    for where in ("text", "markdown", "notebook", "tui"):
        assert f"MFU n/a: {why}" in shown[where], where
    assert '<div class="k">MFU</div><div class="v">n/a</div>' in shown["html"]


def test_no_shapes_on_a_v100_is_na_in_every_front_end(tmp_path: Path) -> None:
    path = sc.write(tmp_path / "v100.json", sc.fp32_gemms(), device="Tesla V100-SXM2-32GB", shapes=False)
    line = "MFU n/a: no operator shapes in the trace (capture with record_shapes=True)"
    shown = _every_rendering(tmp_path, path)
    for where in ("text", "markdown", "notebook", "tui"):
        assert line in shown[where], where
    assert '<div class="k">MFU</div><div class="v">n/a</div>' in shown["html"]
    for where, out in shown.items():
        assert "MFU 0.0%" not in out, where
        assert ">0.0%<" not in out, where


def test_a_tiny_measured_mfu_keeps_its_digits(tmp_path: Path) -> None:
    """One 64×64×64 bf16 GEMM in a 200 ms step: MFU is measured and tiny; every front end gives it
    with two significant digits instead of 0.0%."""
    path = sc.write(tmp_path / "tiny.json", [sc.linear(64, 64, 64, sc.BF16, 2)], steps=4, step_us=200_000)
    d = diagnose(tracekit.read_trace(path, cache=False))
    flops = 2 * 64 * 64 * 64
    mfu = flops / 0.2 / H100_BF16
    assert d.efficiency.mfu == pytest.approx(mfu, rel=1e-9)
    assert f"{100 * mfu:.2g}" == "2.6e-07"
    assert d.efficiency.headline == "MFU 0.00000026% of the bf16 peak (989.4 TFLOP/s, H100 SXM)"
    shown = _every_rendering(tmp_path, path)
    for where in ("text", "markdown", "notebook"):
        assert "MFU 0.00000026% of the bf16 peak (989.4 TFLOP/s, H100 SXM) · 0.0000026 model TFLOP/s achieved" in shown[where], where
    assert d.efficiency.headline in shown["tui"]
    assert '<div class="k">MFU</div><div class="v">0.00000026%</div>' in shown["html"]


def test_nonzero_digits() -> None:
    from tracekit.analysis.efficiency import mfu_pct, nonzero_digits

    assert [nonzero_digits(v) for v in (1234.56, 0.1, 0.0994, 0.012345, 0.0)] == ["1,234.6", "0.1", "0.099", "0.012", "0.0"]
    assert [mfu_pct(v) for v in (0.4123, 0.001, 0.00012)] == ["41.2%", "0.1%", "0.012%"]
