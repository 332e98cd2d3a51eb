"""Regression tests of what the fuzzers found (scripts/fuzz, scripts/fuzz_parsers.py), and the
harnesses' differential checks on their seed corpora with the installed extensions."""

from __future__ import annotations

import array
import json
import random
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES
from fuzz import harnesses, hostile, seeds

from tracekit.native import compiled
from tracekit.parsers import parse


def _trace_text(events: int = 150) -> str:
    doc = json.loads((SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json").read_text())
    return hostile.kineto_text(doc["traceEvents"][:events], {k: v for k, v in doc.items() if k != "traceEvents"})


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure-python"])
def test_args_nested_past_every_recursion_limit_cost_only_their_event(pure: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (was: a RecursionError traceback from msgspec at 5,000 deep)
    if pure:
        monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    text = _trace_text()
    whole = parse(_write(tmp_path / "whole.json", text.encode()))
    path = _write(tmp_path / "deep.json", hostile.with_raw_value(text, "Input Dims", hostile.nested(20_000)).encode())
    tables = parse(path)
    tables.validate()
    assert tables.events.height == whole.events.height - 1
    assert any("damaged trace" in w for w in tables.info.warnings)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_nsight_views_are_never_read(tmp_path: Path) -> None:
    # (was: a view of endless rows, named like a table the reader needs, filled memory)
    src = SAMPLE_TRACES / "synthetic" / "host_sync.nsys.sqlite"
    whole = parse(src)
    for seed in range(3):
        path = hostile.hostile_schema(src, tmp_path / f"view{seed}.sqlite", random.Random(f"recursive_view{seed}"), "recursive_view")
        tables = parse(path)
        tables.validate()
        assert tables.events.height <= whole.events.height


@pytest.mark.skipif(compiled("dag") is None, reason="the native dag kernel was not built")
def test_dag_takes_empty_buffers_at_any_address() -> None:
    # (was: an empty array.array, whose buffer address is not aligned, was refused)
    empty = array.array("q")
    lengths, nodes, status, path, offsets = compiled("dag").longest_paths(empty, empty, [empty], array.array("q", [0, 0]), True)  # type: ignore[union-attr]
    assert memoryview(status).cast("q").tolist() == [0]
    assert memoryview(lengths).cast("q").tolist() == [0]
    assert memoryview(nodes).cast("q").tolist() == [0]
    assert memoryview(path).cast("q").tolist() == []
    assert memoryview(offsets).cast("q").tolist() == [0, 0]
    with pytest.raises(ValueError, match="aligned int64 values in a buffer of 3 bytes"):
        compiled("dag").longest_paths(b"abc", empty, [empty], array.array("q", [0]), False)  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["dag", "sweep", "kineto_scan", "kineto_diff"])
def test_harness_differential_checks_pass_on_their_seeds(name: str) -> None:
    """The native modules against their pure-Python references on every seed of the corpus
    (the campaigns run the same checks on millions of mutations)."""
    harness = harnesses.HARNESSES[name]
    module = harness.module
    if module is not None and compiled(module) is None:
        pytest.skip(f"the native module {module} was not built")
    corpus = seeds.corpus(name)
    for data in corpus[: 120 if name == "kineto_diff" else 400]:
        harness.run(data)


def test_harnesses_refuse_their_classic_bad_inputs() -> None:
    """Inputs the campaigns reduced to: empty, one byte, all-ones bytes."""
    for name in ("dag", "sweep", "kineto_scan", "kineto_diff"):
        module = harnesses.HARNESSES[name].module
        if module is not None and compiled(module) is None:
            continue
        for data in (b"", b"\x00", b"\xff" * 64, b"[", b"[{" * 40):
            harnesses.HARNESSES[name].run(data)
