"""A Kineto trace whose metadata after ``traceEvents`` holds arrays of objects (the
``deviceProperties`` of torch 2.x traces written by some tools) is read whole: the array's
closing bracket is not taken for the end of the events."""

from __future__ import annotations

import json
from pathlib import Path

import tracekit


def test_device_properties_after_the_events_are_read(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 + i, "dur": 1,
         "args": {"device": 0, "stream": 7, "correlation": i}}
        for i in range(5)
    ]  # fmt: skip
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "numSms": 132}]
    text = (
        '{"traceEvents": ' + json.dumps(events) + ', "schemaVersion": 1, "deviceProperties": ' + json.dumps(props)
        + ', "cuda_runtime_version": 12060, "displayTimeUnit": "ms"}'
    )  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(text)
    tables = tracekit.read_trace(path, cache=False)
    assert tables.info.warnings == ()
    assert tables.info.format_version == "1"
    assert tables.devices["name"].to_list() == ["NVIDIA H100 80GB HBM3"]
    assert tables.events.height == 5


def test_log_lines_after_the_events_are_not_damage(tmp_path: Path) -> None:
    # Kineto writes its log lines after the events ("INFO": [...], "ERROR": [...]); their text
    # holds many "]" (``Profiler.cpp:995] ...``) and each array of them ends in "]" too.  None of
    # those closes the events: the trace is whole, without a "damaged" warning, however many
    # log lines there are.
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 + i, "dur": 1,
         "args": {"device": 0, "stream": 7, "correlation": i}}
        for i in range(5)
    ]  # fmt: skip
    info = [f"INFO:2024-11-11 10:02:56 1:1 CuptiActivityProfiler.cpp:{995 + i}] [Profiler = P{i}] step" for i in range(40)]
    errors = ["ERROR:2024-11-11 10:03:10 1:1 DeviceProperties.cpp:47] gpuGetDeviceCount failed with code 35"]
    text = (
        '{"schemaVersion": 1, "traceEvents": ' + json.dumps(events, indent=2) + ',\n  "INFO": ' + json.dumps(info)
        + ',\n  "ERROR": ' + json.dumps(errors) + ',\n  "traceName": "/tmp/t.json", "baseTimeNanoseconds": 1727743122000000000\n}'
    )  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(text)
    tables = tracekit.read_trace(path, cache=False)
    assert tables.info.warnings == ()
    assert tables.events.height == 5


def test_an_empty_events_array_is_an_empty_trace(tmp_path: Path) -> None:
    # ``"traceEvents": []`` is closed: an empty trace, not one "truncated before its first
    # complete event" (the bracket right after the array's own "[" closes it)
    for i, text in enumerate(
        [
            '{"traceEvents": [], "schemaVersion": 1}',
            '{"traceEvents":[ \n ],"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}',
            '{"schemaVersion": 1, "traceEvents": []}',
        ]
    ):
        path = tmp_path / f"empty{i}.json"
        path.write_text(text)
        tables = tracekit.read_trace(path, cache=False)
        assert tables.events.height == 0
        assert tables.info.warnings == ()
