"""Cross-check tracekit's Kineto parser against Holistic Trace Analysis' numbers.

tests/data/hta_reference.json holds, for every shared Kineto trace HTA could load, HTA's
kernel/memcpy/memset counts and summed durations (recorded by scripts/hta_reference.py in
the benchmark venv, so HTA is not needed here).  tracekit must find the same number of
each, and the same total time:

* Traces with integer ``ts``/``dur`` (µs): HTA keeps them as they are, so the sums must be
  equal to the nanosecond.
* ns-resolution traces (``ts_float``): HTA rounds every event to ``ceil(ts)`` …
  ``floor(ts + dur)``, computed on float64 µs.  That is not the exact rounding: at the
  epoch-µs magnitudes some traces use (~1.7e15, where a float64 step is 0.25 µs) the float
  sum ``ts + dur`` itself rounds, sometimes up to the next whole µs (``…583.0 + 4.928``
  gives ``…588.0``, so HTA says 5 µs for a 4.928 µs kernel); 572 of the 4,350 kernels of
  ns_resolution_trace differ from exact-integer rounding that way.  So the test replays
  HTA's arithmetic: tracekit's integer ns divided by 1000 (Python's int/int division is
  correctly rounded, so it gives back the very float64 HTA decoded from the JSON text),
  then the same float add, ceil and floor.  The replay is exact, so the sums must be
  equal: tolerance 0.  A second, coarse check bounds tracekit's exact sum against HTA's:
  ceil/floor move each duration by less than 2 µs, and the float add by at most half a
  float64 step (0.125 µs at 1.7e15 µs), so they differ by at most 2.125 µs per event.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit import read_trace

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
REFERENCE = Path(__file__).resolve().parent / "data" / "hta_reference.json"
KINDS = ("kernel", "memcpy", "memset")

pytestmark = [
    pytest.mark.shared,
    pytest.mark.skipif(not SHARED.is_dir(), reason=f"the shared traces are not here ({SHARED})"),
]

#: traces where tracekit is known to disagree with HTA because tracekit is wrong: path → reason
KNOWN_WRONG: dict[str, str] = {}


def _reference() -> dict[str, Any]:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


def _cases() -> list[Any]:
    cases = []
    for rel, entry in _reference()["traces"].items():
        marks = []
        if entry.get("status") != "ok":
            marks.append(pytest.mark.skip(reason=f"HTA could not load it: {entry.get('error')}"))
        elif rel in KNOWN_WRONG:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[rel]))
        cases.append(pytest.param(rel, entry, id=rel, marks=marks))
    return cases


def _hta_totals(entry: dict[str, Any]) -> dict[str, tuple[int, float]]:
    """HTA's (count, summed µs) per kind, over every rank in the file."""
    totals = {}
    for kind in KINDS:
        count = sum(r[f"{kind}_count"] for r in entry["ranks"].values())
        dur = sum(r[f"{kind}_dur_us_sum"] or 0 for r in entry["ranks"].values())
        totals[kind] = (count, dur)
    return totals


def _hta_rounded_us(rows: pl.DataFrame, base_ns: int) -> int:
    """Sum of HTA's per-event durations for ns-resolution traces: floor(ts + dur) - ceil(ts) in float64 µs."""
    total = 0
    for start_ns, dur_ns in rows.iter_rows():
        ts = (start_ns - base_ns) / 1000  # int / int: the correctly rounded float64, as json.loads gave HTA
        dur = dur_ns / 1000
        total += math.floor(ts + dur) - math.ceil(ts)
    return total


def _base_ns(tables: Any) -> int:
    value = tables.info.metadata.get("baseTimeNanoseconds")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def test_reference_file_is_well_formed() -> None:
    ref = _reference()
    assert ref["hta_version"], "the reference must say which HTA produced it"
    assert ref["traces"], "the reference lists no traces"
    for rel, entry in ref["traces"].items():
        assert entry["status"] in ("ok", "error"), rel
        if entry["status"] == "error":
            assert entry["error"], f"{rel}: an error entry must carry HTA's error text"
            continue
        for rank in entry["ranks"].values():
            for kind in KINDS:
                assert isinstance(rank[f"{kind}_count"], int), f"{rel}: {kind}_count"


@pytest.mark.parametrize(("rel", "entry"), _cases())
def test_counts_and_durations_match_hta(rel: str, entry: dict[str, Any]) -> None:
    path = SHARED / rel
    if not path.exists():
        pytest.skip(f"{rel} is not in this copy of the shared traces")
    tables = read_trace(path, cache=False)
    events = tables.events
    base = _base_ns(tables)
    hta = _hta_totals(entry)
    for kind in KINDS:
        rows = events.filter(pl.col("kind") == kind).select("start_ns", "dur_ns")
        hta_count, hta_us = hta[kind]
        assert rows.height == hta_count, f"{kind} count: tracekit {rows.height}, HTA {hta_count}"
        exact_ns = int(rows["dur_ns"].sum()) if rows.height else 0
        if not entry.get("ts_float"):
            # integer-µs trace: HTA does not round, the sums are equal
            assert exact_ns == round(hta_us * 1000), f"{kind} time: tracekit {exact_ns} ns, HTA {hta_us} µs"
            continue
        replayed_us = _hta_rounded_us(rows, base)
        assert replayed_us == hta_us, (
            f"{kind} time: tracekit's values rounded as HTA rounds give {replayed_us} µs, HTA {hta_us} µs"
        )
        assert abs(exact_ns - hta_us * 1000) <= 2125 * hta_count, (
            f"{kind} time: exact {exact_ns} ns vs HTA {hta_us} µs: more than HTA's rounding explains"
        )
