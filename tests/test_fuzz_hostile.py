"""Regression tests of what the fuzzers found (scripts/fuzz, scripts/fuzz_parsers.py), and the
harnesses' differential checks on their seed corpora with the installed extensions."""

from __future__ import annotations

import array
import io
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_TRACES
from fuzz import harnesses, hostile, seeds

from tracekit.native import compiled
from tracekit.parsers import parse
from tracekit.parsers._jsonarray import ArrayStream, iter_event_chunks


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


_EV_A = b'{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}'
_EV_B = _EV_A.replace(b'"a"', b'"b"')
#: where a run of blanks sits, the document around it, and the names of the events it keeps
_BLANK_RUNS = {
    "between events": (lambda w: b'{"traceEvents": [' + _EV_A + b"," + w + _EV_B + b"]}", ["a", "b"]),
    "before a comma": (lambda w: b'{"traceEvents": [' + _EV_A + w + b"," + _EV_B + b"]}", ["a", "b"]),
    "before the closing bracket": (lambda w: b'{"traceEvents": [' + _EV_A + w + b"]}", ["a"]),
    "after the document": (lambda w: b'{"traceEvents": [' + _EV_A + b"]}" + w, ["a"]),
    "before the document": (lambda w: w + b'{"traceEvents": [' + _EV_A + b"]}", ["a"]),
    "bare array, not closed": (lambda w: b"[" + _EV_A + b"," + w, ["a"]),
    "truncated after the run": (lambda w: b'{"traceEvents": [' + _EV_A + b"," + w + b'{"ph": "X", "na', ["a"]),
    "newlines and tabs": (lambda w: b'{"traceEvents": [' + _EV_A + b"," + w.replace(b"    ", b"\t\r\n ") + _EV_B + b"]}", ["a", "b"]),
    "a long array of numbers": (lambda w: b'{"traceEvents": [{"args": [' + w.replace(b"  ", b"1,") + b'1]},' + _EV_B + b"]}", [None, "b"]),
}


@pytest.mark.parametrize("where", sorted(_BLANK_RUNS))
def test_a_run_of_blanks_costs_linear_time(where: str) -> None:
    # (was: every block read after the run searched it again byte by byte in Python: 2 MB of
    # blanks in 32 kB chunks took 17 s, a gzip of 100 kB inflating to 100 MB over 300 s)
    build, names = _BLANK_RUNS[where]
    data = build(b" " * (2 << 20))
    state = ArrayStream()
    started = time.perf_counter()
    chunks = list(iter_event_chunks(io.BytesIO(data), state, _json_chunk, chunk_bytes=32 * 1024))
    elapsed = time.perf_counter() - started
    assert [ev.get("name") for chunk in chunks for ev in chunk] == names
    assert state.truncated == (where == "truncated after the run")
    assert state.damaged_bytes == 0
    assert elapsed < 2.0, f"{elapsed:.1f} s for 2 MB"


def _json_chunk(chunk: bytes | memoryview) -> Any:
    try:
        return json.loads(bytes(chunk))
    except json.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure-python"])
def test_a_gzip_of_blanks_inside_the_events_is_read(pure: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if pure:
        monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    path = _write(tmp_path / "bomb.json.gz", hostile.gzip_bomb(8 << 20))
    tables = parse(path)
    tables.validate()
    assert sorted(tables.events["name"].to_list()) == ["a", "b"]
    assert not any("damaged" in w or "truncated" in w for w in tables.info.warnings)


def test_a_campaign_of_runs_and_minutes_lasts_until_both_are_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--runs R --minutes M``: a first process for the time, then one for the executions
    still missing; the figures of both added up (a finding in the first ends the campaign)."""
    from fuzz import cli

    calls: list[tuple[int | None, int | None]] = []

    def process(name: str, seconds: int | None, runs: int | None) -> dict[str, object]:
        calls.append((seconds, runs))
        done = 300 if runs is None else runs
        return {"harness": name, "executions": done, "seconds": 60.0 if runs is None else 12.5, "edges": 5,
                "sanitizer_reports": 0, "leaks": 0, "hangs": 0, "crashes": 0, "tool_failures": 0, "exit": 0,
                "peak_rss_mb": 100 if runs is None else 120, "log": "x"}  # fmt: skip

    monkeypatch.setattr(cli, "_run_process", process)
    out = cli.run_one("dag", 60, 1000)
    assert calls == [(60, None), (None, 700)]
    assert (out["executions"], out["seconds"], out["peak_rss_mb"]) == (1000, 72.5, 120)
    calls.clear()
    assert cli.run_one("dag", 60, 200)["executions"] == 300  # the time alone gave enough
    assert calls == [(60, None)]


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure-python"])
def test_lone_surrogates_in_the_metadata_and_counters_become_replacement_characters(
    pure: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (was: a UnicodeEncodeError traceback from polars: Python's json turns "\udfff" into a str
    # that has no UTF-8; mutation fuzzer cases kineto-14743 and kineto-15997)
    if pure:
        monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    doc = json.loads((SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json").read_text())
    doc["deviceProperties"][0]["name"] = "\udfffGPU"
    doc["distributedInfo"] = {"backend": "nccl", "\ud800rank": 0, "nested": [[["\udc00"]]]}
    counter = {"ph": "C", "name": "memory", "pid": 1, "tid": 1, "ts": doc["traceEvents"][5]["ts"], "args": {"\udfffbytes": 5}}
    doc["traceEvents"] = [*doc["traceEvents"][:150], counter]
    # json.dumps writes each lone surrogate as its escape, as a damaged or hostile writer would
    text = json.dumps(doc)
    assert "\\udfff" in text
    tables = parse(_write(tmp_path / "surrogates.json", text.encode()))
    tables.validate()
    assert tables.devices["name"].to_list()[0] == "\ufffdGPU"
    assert "\ufffdbytes" in tables.counters["series"].to_list()
