#!/usr/bin/env python3
"""The GPU truth against tracekit's predictions: the error of every fix's predicted step time.

Reads ``measured.json`` (``scripts/gpu_truth.py`` wrote it beside the captures), runs
``tracekit analyze`` on each pair's "before" capture and compares

* the predicted step time of the finding that prices the pair's change (the first of the pair's
  kinds the analysis reports) with the measured "after" run, and
* for a chain (several changes one after another), the fix plan's cumulative predictions (the
  JSON report's ``plan``: each item's ``predicted_step_ms`` is the step with it and every
  earlier item applied) with the run measured after each change; skipped until the report
  has a plan.

The captures ran under the profiler (stacks and shapes), which slows a host-bound step; the
prediction is therefore scaled to the uninstrumented run: ``measured before x predicted /
captured before``, and the error is ``(scaled prediction - measured after) / measured after``.
The raw prediction against the capture of the "after" run (both under the profiler) is shown
as well.  The batch-size pair compares time per sample.

    python scripts/gpu_truth_compare.py [--measured sample_traces/gpu/measured.json] [--json]

prints the table for docs/critical-path.md ("Real-GPU truth"); ``tests/test_gpu_truth.py``
asserts the errors.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MEASURED = REPO / "sample_traces" / "gpu" / "measured.json"


@dataclass(frozen=True)
class Row:
    """One prediction against its truth."""

    pair: str
    #: which change of the pair (0 for a pair; 0, 1, ... along a chain)
    change: int
    #: "finding" (a single fix) or "plan" (cumulative)
    source: str
    kinds: tuple[str, ...]
    #: the kind compared (None: the analysis reported none of ``kinds``)
    kind: str | None
    measured_before_ms: float
    captured_before_ms: float | None
    predicted_ms: float | None
    measured_after_ms: float
    captured_after_ms: float | None
    per_sample: bool = False
    note: str = ""

    @property
    def scaled_ms(self) -> float | None:
        """The prediction carried over to the uninstrumented run."""
        if self.predicted_ms is None or not self.captured_before_ms:
            return None
        return self.measured_before_ms * self.predicted_ms / self.captured_before_ms

    @property
    def error(self) -> float | None:
        """(scaled prediction - measured after) / measured after."""
        scaled = self.scaled_ms
        return None if scaled is None or not self.measured_after_ms else (scaled - self.measured_after_ms) / self.measured_after_ms

    @property
    def error_vs_captured(self) -> float | None:
        """(prediction - captured after) / captured after: both under the profiler."""
        if self.predicted_ms is None or not self.captured_after_ms:
            return None
        return (self.predicted_ms - self.captured_after_ms) / self.captured_after_ms

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "scaled_ms": self.scaled_ms, "error": self.error, "error_vs_captured": self.error_vs_captured}


def analyse(folder: Path) -> dict[str, Any]:
    """``tracekit analyze FOLDER --format json`` (a fresh process, no cache)."""
    proc = subprocess.run([sys.executable, "-m", "tracekit", "analyze", str(folder), "--format", "json", "--no-cache", "--quiet"],
                          capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"tracekit analyze {folder} failed: {proc.stderr.strip()[-500:]}")
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def _first_finding(report: Mapping[str, Any], kinds: Sequence[str]) -> dict[str, Any] | None:
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    for kind in kinds:
        for f in findings:
            if f.get("kind") == kind:
                return f
    return None


def _step(report: Mapping[str, Any]) -> float | None:
    value = (report.get("summary") or {}).get("step_ms_median")
    return float(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class Comparison:
    rows: tuple[Row, ...]
    #: pair → why its plan rows are missing (no plan in the report yet, a step not in the plan)
    plan_skipped: Mapping[str, str]
    #: pair → why it was not compared (not measured)
    not_compared: Mapping[str, str]


def compare(measured: Path = MEASURED, analyse_folder: Callable[[Path], dict[str, Any]] = analyse) -> Comparison:
    """Every comparison ``measured`` allows (see the module docstring)."""
    doc = json.loads(measured.read_text(encoding="utf-8"))
    root = measured.parent
    runs: Mapping[str, Any] = doc.get("runs") or {}
    reports: dict[str, dict[str, Any]] = {}

    def report_of(run: str) -> dict[str, Any]:
        if run not in reports:
            reports[run] = analyse_folder(root / str(runs[run]["capture"]))
        return reports[run]

    rows: list[Row] = []
    plan_skipped: dict[str, str] = {}
    not_compared: dict[str, str] = {}
    for name, pair in (doc.get("pairs") or {}).items():
        if pair.get("status") != "measured":
            not_compared[name] = str(pair.get("status"))
            continue
        per_sample = bool(pair.get("per_sample"))

        def per(run: str, ms: float | None, per_sample: bool = per_sample) -> float | None:
            batch = runs[run].get("batch_size")
            return ms if ms is None or not per_sample else ms / float(batch)

        before = pair["before"]
        report = report_of(before)
        common = {
            "pair": name, "per_sample": per_sample,
            "measured_before_ms": per(before, float(runs[before]["median_step_ms"])),
            "captured_before_ms": per(before, _step(report)),
        }
        kinds = tuple(pair["kinds"][0])
        after = pair["after"][0]
        finding = _first_finding(report, kinds)
        predicted = finding.get("predicted_step_ms") if finding else None
        rows.append(Row(
            change=0, source="finding", kinds=kinds, kind=finding.get("kind") if finding else None,
            predicted_ms=per(before, float(predicted)) if isinstance(predicted, (int, float)) else None,
            measured_after_ms=per(after, float(runs[after]["median_step_ms"])) or 0.0,
            captured_after_ms=per(after, _step(report_of(after))),
            note="" if finding else f"no {' or '.join(kinds)} finding", **common,
        ))
        if len(pair["after"]) > 1:
            plan = report.get("plan")
            if not isinstance(plan, list):
                plan_skipped[name] = "the JSON report has no `plan` yet"
                continue
            rows.extend(_plan_rows(name, pair, plan, runs, report_of, per, common))
    return Comparison(rows=tuple(rows), plan_skipped=plan_skipped, not_compared=not_compared)


def _plan_rows(name: str, pair: Mapping[str, Any], plan: list[Any], runs: Mapping[str, Any],
               report_of: Callable[[str], dict[str, Any]], per: Callable[[str, float | None], float | None],
               common: Mapping[str, Any]) -> list[Row]:
    """One row per change of a chain: the first plan item, after the previous change's, of its kinds."""
    rows = []
    start = 0
    for k, (kinds_list, after) in enumerate(zip(pair["kinds"], pair["after"], strict=True)):
        kinds = tuple(kinds_list)
        index = next((i for i in range(start, len(plan)) if isinstance(plan[i], dict) and plan[i].get("kind") in kinds), None)
        item = plan[index] if index is not None else None
        predicted = item.get("predicted_step_ms") if item else None
        rows.append(Row(
            change=k, source="plan", kinds=kinds, kind=item.get("kind") if item else None,
            predicted_ms=per(pair["before"], float(predicted)) if isinstance(predicted, (int, float)) else None,
            measured_after_ms=per(after, float(runs[after]["median_step_ms"])) or 0.0,
            captured_after_ms=per(after, _step(report_of(after))),
            note="" if item else f"no plan step of {' or '.join(kinds)} after step {start}", **common,
        ))
        start = index + 1 if index is not None else start
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def markdown(comparison: Comparison, doc: Mapping[str, Any] | None = None) -> str:
    """The error table (and what could not be compared) as Markdown."""
    lines = []
    if doc is not None:
        m = doc.get("machine") or {}
        lines.append(f"Measured on {m.get('gpu') or 'the CPU'} (torch {m.get('torch_version')}, CUDA {m.get('cuda_version')}, "
                     f"driver {m.get('driver_version')}), {doc.get('made', {}).get('date')}: "
                     f"`{' '.join(doc.get('made', {}).get('command') or [])}`.")
        lines.append("")
    lines += [
        "| pair | change | priced by | measured before ms | captured before ms | predicted ms | predicted, scaled ms "
        "| measured after ms | error | captured after ms | error vs capture |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in comparison.rows:
        unit = " (per sample)" if r.per_sample else ""
        what = f"{r.source}: {r.kind or 'none of ' + '/'.join(r.kinds)}"
        lines.append(f"| {r.pair}{unit} | {r.change + 1} | {what} | {_ms(r.measured_before_ms)} | {_ms(r.captured_before_ms)} "
                     f"| {_ms(r.predicted_ms)} | {_ms(r.scaled_ms)} | {_ms(r.measured_after_ms)} | {_pct(r.error)} "
                     f"| {_ms(r.captured_after_ms)} | {_pct(r.error_vs_captured)} |")
    errors = [abs(r.error) for r in comparison.rows if r.error is not None]
    if errors:
        lines += ["", f"Mean |error| {sum(errors) / len(errors) * 100:.1f}%, worst {max(errors) * 100:.1f}% over {len(errors)} "
                  "predictions (target: 5% each)."]
    for name, why in {**comparison.plan_skipped, **comparison.not_compared}.items():
        lines.append(f"- {name}: not compared ({why})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measured", type=Path, default=MEASURED, help="measured.json [sample_traces/gpu/measured.json]")
    parser.add_argument("--json", action="store_true", help="the rows as JSON")
    args = parser.parse_args(argv)
    if not args.measured.exists():
        print(f"no {args.measured}: the campaign has not run yet (sample_traces/gpu/README.md says how)", file=sys.stderr)
        return 2
    comparison = compare(args.measured)
    if args.json:
        print(json.dumps({"rows": [r.to_dict() for r in comparison.rows], "plan_skipped": dict(comparison.plan_skipped),
                          "not_compared": dict(comparison.not_compared)}, indent=1))
    else:
        print(markdown(comparison, json.loads(args.measured.read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
