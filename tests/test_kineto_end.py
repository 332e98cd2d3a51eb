"""The end of a Kineto parse (``_build_tables``) runs parts of its work on a second thread:
its value comes back, and its failure is raised in the caller, not lost."""

from __future__ import annotations

import threading

import pytest

from tracekit.parsers import kineto


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
