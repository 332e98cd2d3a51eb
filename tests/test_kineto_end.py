"""The end of a Kineto parse (``_build_tables``) runs parts of its work on a second thread:
its value comes back, and its failure is raised in the caller, not lost."""

from __future__ import annotations

import threading

import polars as pl
import pytest

from tracekit.parsers import kineto
from tracekit.schema import canonical_order, start_order


def test_beside_returns_the_work_value_from_another_thread() -> None:
    seen: list[str] = []

    def work() -> int:
        seen.append(threading.current_thread().name)
        return 41 + 1

    beside = kineto._Beside(work)
    assert beside.result() == 42
    assert len(seen) == 1
    assert seen[0] != threading.current_thread().name


def test_beside_raises_the_work_error_in_the_caller() -> None:
    def work() -> int:
        raise ValueError("broken part")

    beside = kineto._Beside(work)
    with pytest.raises(ValueError, match="broken part"):
        beside.result()


def test_start_order_from_unshifted_starts_matches_the_shifted_one() -> None:
    start = pl.Series("start_ns", [5, None, 3, 5, -2, 3, None, 0], dtype=pl.Int64)
    base = 1_700_000_000_000_000_000
    lead = kineto._start_order(start, base)
    assert lead is not None
    assert lead.to_list() == start_order(start + base).to_list() == [4, 7, 2, 5, 0, 3, 1, 6]
    events = pl.DataFrame(
        {"start_ns": start + base, "dur_ns": [1, 2, 3, 1, 1, 3, 2, 0], "pid": [2, 1, 1, 1, 1, 2, 1, 1]}
    )
    assert canonical_order(events, lead).to_list() == canonical_order(events).to_list()


def test_start_order_declines_when_the_base_time_would_overflow() -> None:
    start = pl.Series("start_ns", [2**62, 1], dtype=pl.Int64)
    assert kineto._start_order(start, 2**62) is None
    assert kineto._start_order(start, -(2**62)) is not None
    assert kineto._start_order(pl.Series("start_ns", [None], dtype=pl.Int64), 2**62) is not None
