"""The Kineto (PyTorch profiler) reader: small inline traces with exact answers, every real
trace under ../shared/traces checked against an independent count of its raw JSON, and the
salvage of truncated and damaged files."""

from __future__ import annotations

import gzip
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import SHARED_TRACES, shared_kineto_traces, shared_trace, shared_trace_params, write_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.errors import TraceCorruptError, TraceFormatError, TraceNotFoundError
from tracekit.parsers import detect_format, parse
from tracekit.parsers.kineto import read_kineto

CHAKRA = "hta/tests/data/execution_trace/benchmark_simple_add_et.json.gz"


def _x(cat: str, name: str, ts: float, dur: float, pid: Any = 10, tid: Any = 11, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _step_events() -> list[dict[str, Any]]:
    """One step: an op launches a kernel (correlation 5) and copies pageable memory (6)."""
    return [
        _x("user_annotation", "ProfilerStep#1", 1000, 100, **{"External id": 1}),
        _x("cpu_op", "aten::mm", 1010, 20, **{"External id": 2, "Sequence number": 7}),
        _x("cuda_runtime", "cudaLaunchKernel", 1015, 5, **{"External id": 2, "correlation": 5}),
        _x("kernel", "gemm", 1030, 40, pid=0, tid=7, **{"External id": 2, "correlation": 5, "device": 0, "stream": 7,
           "grid": [4, 2, 1], "block": [128, 1, 1], "registers per thread": 64, "shared memory": 1024,
           "est. achieved occupancy %": 50}),
        _x("cuda_runtime", "cudaMemcpyAsync", 1040, 30, **{"External id": 3, "correlation": 6}),
        _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 1045, 20, pid=0, tid=7,
           **{"correlation": 6, "device": 0, "stream": 7, "bytes": 4096}),
        {"ph": "s", "id": 5, "pid": 10, "tid": 11, "ts": 1015, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 5, "pid": 0, "tid": 7, "ts": 1030, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10, "tid": 11, "ts": 1012, "s": "t",
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 123, "Bytes": 512, "Total Allocated": 2048,
                  "Total Reserved": 4096}},
    ]


def test_small_trace_columns_are_exact(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", _step_events(), baseTimeNanoseconds=1_000_000,
                       distributedInfo={"rank": 3, "world_size": 8, "backend": "nccl"},
                       deviceProperties=[{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 80 * 2**30,
                                          "computeMajor": 9, "computeMinor": 0, "numSms": 132}])
    t = read_kineto(path)
    t.validate()
    assert t.kind_counts() == {"annotation": 1, "cpu_op": 1, "runtime": 2, "kernel": 1, "memcpy": 1}
    assert t.info.rank == 3
    assert t.info.world_size == 8
    assert t.info.backend == "nccl"
    kernel = t.events.filter(kind="kernel").row(0, named=True)
    assert kernel["start_ns"] == 1_000_000 + 1030 * 1000
    assert kernel["dur_ns"] == 40_000
    assert kernel["end_ns"] == kernel["start_ns"] + 40_000
    assert (kernel["device"], kernel["stream"], kernel["tid"]) == (0, 7, None)
    assert kernel["pid"] == 10, "GPU rows belong to the launching process"
    assert (kernel["grid_blocks"], kernel["block_threads"]) == (8, 128)
    assert (kernel["registers_per_thread"], kernel["shared_memory_bytes"], kernel["occupancy_pct"]) == (64, 1024, 50.0)
    assert kernel["rank"] == 3
    copy = t.events.filter(kind="memcpy").row(0, named=True)
    assert (copy["memcpy_kind"], copy["src_memory"], copy["dst_memory"], copy["bytes"]) == ("HtoD", "pageable", "device", 4096)
    op = t.events.filter(kind="cpu_op").row(0, named=True)
    assert op["sequence_nr"] == 7
    assert op["external_id"] == 2
    assert op["device"] is None
    # links: both by correlation, one also confirmed by a flow
    launch_names = t.links.join(t.events.select(pl.col("event_id").alias("launch_event_id"), "name"), on="launch_event_id")
    assert sorted(launch_names["name"].to_list()) == ["cudaLaunchKernel", "cudaMemcpyAsync"]
    assert set(t.links["link_source"].to_list()) == {"correlation"}
    flow = t.flows.row(0, named=True)
    assert flow["flow_kind"] == "launch"
    assert t.events.filter(pl.col("event_id") == flow["src_event_id"])["name"].item() == "cudaLaunchKernel"
    assert t.events.filter(pl.col("event_id") == flow["dst_event_id"])["name"].item() == "gemm"
    assert t.memory.row(0, named=True)["total_reserved_bytes"] == 4096
    assert t.devices.row(0, named=True)["sm_count"] == 132
    assert t.threads.filter(pl.col("stream") == 7)["thread_name"].item() == "stream 7"
    # sorted, ids are positions
    assert t.events["event_id"].to_list() == list(range(t.events.height))
    assert t.events["start_ns"].is_sorted()


def test_event_order_in_file_does_not_matter(tmp_path: Path) -> None:
    events = _step_events()
    a = read_kineto(write_trace(tmp_path / "a.json", events))
    shuffled = events[:]
    random.Random(7).shuffle(shuffled)
    b = read_kineto(write_trace(tmp_path / "b.json", shuffled))
    for name in ("events", "links", "flows", "threads", "memory"):
        assert getattr(a, name).equals(getattr(b, name)), name


def test_ns_fraction_timestamps_are_exact(tmp_path: Path) -> None:
    events = [_x("cpu_op", "a", 4203669603187.439, 9288.291), _x("cpu_op", "b", 1.001, 0.999)]
    t = read_kineto(write_trace(tmp_path / "t.json", events, baseTimeNanoseconds=1_700_000_000_000_000_000))
    rows = {r["name"]: r for r in t.events.iter_rows(named=True)}
    assert rows["a"]["start_ns"] == 1_700_000_000_000_000_000 + 4203669603187439
    assert rows["a"]["dur_ns"] == 9288291
    assert rows["b"]["start_ns"] == 1_700_000_000_000_000_000 + 1001
    assert rows["b"]["dur_ns"] == 999


def test_pytorch_18_vintage(tmp_path: Path) -> None:
    """Capitalised categories, string tids, 'external id', flow cat 'async', computeProperties."""
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::add", "pid": 24572, "tid": "24572", "ts": 100, "dur": 20,
         "args": {"Device": 24572, "External id": 2}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 24572, "tid": "24572", "ts": 105, "dur": 5,
         "args": {"correlation": 311, "external id": 2}},
        {"ph": "X", "cat": "Kernel", "name": "add_kernel", "pid": 0, "tid": "stream 7", "ts": 120, "dur": 3,
         "args": {"device": 0, "stream": 7, "correlation": 311, "external id": 2}},
        {"ph": "s", "id": 311, "pid": 24572, "tid": 24572, "ts": 105, "cat": "async", "name": "launch"},
        {"ph": "f", "id": 311, "pid": 0, "tid": "stream 7", "ts": 120, "cat": "async", "name": "launch", "bp": "e"},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Traces", "tid": "PyTorch Profiler", "ts": 90, "dur": 50},
        {"ph": "C", "name": "GPU 0 Util", "pid": 0, "ts": 110, "args": {"GPU Utilization": 0.5}},
    ]
    t = read_kineto(write_trace(tmp_path / "t.json", events,
                                computeProperties=[{"id": 0, "name": "Tesla V100", "major": 7, "minor": 0,
                                                    "multiProcessorCount": 80, "totalGlobalMem": 34084028416}]))
    assert t.kind_counts() == {"cpu_op": 1, "runtime": 1, "kernel": 1}
    runtime = t.events.filter(kind="runtime").row(0, named=True)
    assert runtime["tid"] == 24572
    assert runtime["external_id"] == 2
    kernel = t.events.filter(kind="kernel").row(0, named=True)
    assert kernel["stream"] == 7
    assert kernel["device"] == 0
    assert t.links.height == 1
    assert t.flows.row(0, named=True)["dst_event_id"] == kernel["event_id"]
    assert t.devices.row(0, named=True)["compute_major"] == 7
    assert t.counters.row(0, named=True)["value"] == 0.5


def test_cuda_sync_rows_get_the_waiting_thread(tmp_path: Path) -> None:
    events = [
        _x("cuda_runtime", "cudaStreamSynchronize", 100, 50, correlation=9),
        _x("cuda_sync", "Stream Sync", 100, 49, pid=0, tid=7,
           **{"correlation": 9, "device": 0, "stream": 7, "cuda_sync_kind": "Stream Sync", "wait_on_stream": -1,
              "wait_on_cuda_event_record_corr_id": -1}),
        _x("cuda_sync", "Stream Wait Event", 160, 1, pid=0, tid=8,
           **{"correlation": 10, "device": 0, "stream": 8, "wait_on_stream": 8, "wait_on_cuda_event_record_corr_id": 4}),
    ]
    t = read_kineto(write_trace(tmp_path / "t.json", events))
    syncs = t.events.filter(kind="sync").sort("start_ns")
    first, second = syncs.rows(named=True)
    assert (first["sync_kind"], first["pid"], first["tid"], first["stream"]) == ("stream_sync", 10, 11, 7)
    assert (second["sync_kind"], second["wait_stream"], second["wait_event_correlation"]) == ("stream_wait_event", 8, 4)


def test_cuda_graph_launch_fans_out(tmp_path: Path) -> None:
    events = [_x("cuda_runtime", "cudaGraphLaunch", 100, 10, correlation=42)]
    events += [_x("kernel", f"k{i}", 120 + i * 5, 4, pid=0, tid=7, correlation=42, device=0, stream=7) for i in range(5)]
    t = read_kineto(write_trace(tmp_path / "t.json", events))
    assert t.links.height == 5
    assert t.links["launch_event_id"].n_unique() == 1


def test_integers_above_int64_and_odd_types(tmp_path: Path) -> None:
    events = [
        _x("cpu_op", "record_param_comms", 200, 100, **{"Comms Id": 10159970886766084423, "External id": 2**70}),
        _x("cuda_runtime", "hipMemcpyWithStream", 300, 10, stream="0x0", size="2560", kind="1", correlation="17"),
        {"ph": "X", "cat": "cpu_op", "name": "weird", "pid": "host", "tid": "main", "ts": "400.5", "dur": "1"},
    ]
    t = read_kineto(write_trace(tmp_path / "t.json", events))
    rows = {r["name"]: r for r in t.events.iter_rows(named=True)}
    assert rows["record_param_comms"]["external_id"] is None  # does not fit int64: null, not wrapped
    assert rows["hipMemcpyWithStream"]["correlation"] == 17
    assert rows["weird"]["start_ns"] == 400_500
    assert rows["weird"]["pid"] < 0


def test_bare_array_with_and_without_closing_bracket(tmp_path: Path) -> None:
    events = _step_events()
    closed = tmp_path / "closed.json"
    closed.write_text(json.dumps(events))
    open_ended = tmp_path / "open.json"
    open_ended.write_text(json.dumps(events)[:-1] + ",\n")
    a, b = read_kineto(closed), read_kineto(open_ended)
    assert a.events.equals(b.events)
    assert not a.info.truncated
    assert not b.info.truncated
    assert a.info.warnings == ()
    assert b.info.warnings == ()


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_truncated_trace_keeps_every_complete_event(tmp_path: Path, gz: bool) -> None:
    events = [_x("cpu_op", f"op{i}", 1000 + i * 10, 5, **{"External id": i}) for i in range(400)]
    doc = b'{"schemaVersion": 1, "traceEvents": [\n'
    ends = []
    for i, e in enumerate(events):
        doc += (b",\n" if i else b"") + json.dumps(e, indent=1).encode()
        ends.append(len(doc))
    doc += b'\n], "traceName": "x"}'
    rng = random.Random(11)
    for _ in range(12):
        cut = rng.randrange(len(doc) // 10, len(doc) - 30)
        data = doc[:cut]
        complete = sum(1 for end in ends if end <= cut)  # events whose closing brace is before the cut
        path = tmp_path / ("cut.json.gz" if gz else "cut.json")
        path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        if complete == 0:
            with pytest.raises(TraceCorruptError):
                read_kineto(path)
            continue
        t = read_kineto(path)
        assert t.events.height == complete, cut
        assert t.info.truncated
        assert any("truncated" in w for w in t.info.warnings)


def test_gzip_cut_mid_stream_is_salvaged(tmp_path: Path) -> None:
    events = [_x("cpu_op", f"op{i}", 1000 + i, 1) for i in range(5000)]
    data = gzip.compress(json.dumps({"traceEvents": events}).encode(), mtime=0)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    t = read_kineto(path)
    assert 0 < t.events.height < 5000
    assert t.info.truncated


def test_small_chunks_give_the_same_tables(tmp_path: Path) -> None:
    """The chunked reader must not depend on where chunks are cut."""
    events = _step_events() * 50
    path = write_trace(tmp_path / "t.json", events)
    whole = read_kineto(path)
    tiny = read_kineto(path, chunk_bytes=700)
    assert whole.events.equals(tiny.events)
    assert whole.links.equals(tiny.links)
    assert whole.flows.equals(tiny.flows)
    assert whole.threads.equals(tiny.threads)


def test_nan_literals_and_wrong_types_are_tolerated(tmp_path: Path) -> None:
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7, "ts": 10, "dur": 2,'
        ' "args": {"memory bandwidth (GB/s)": NaN, "bytes": 8, "stream": 7, "device": 0}},'
        '{"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"External id": [1]}},'
        '{"ph": "X", "cat": "cpu_op", "name": {"bad": 1}, "pid": 1, "tid": 1, "ts": 6, "dur": 1}'
        "]}"
    )
    path = tmp_path / "t.json"
    path.write_text(text)
    t = read_kineto(path)
    assert t.kind_counts() == {"cpu_op": 1, "memcpy": 1}
    assert t.events.filter(kind="memcpy")["bytes"].item() == 8
    assert any("malformed" in w for w in t.info.warnings)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"", TraceFormatError),
        (b"ts,dur,name\n1,2,x\n", TraceFormatError),
        (b'{"schema": "1.0", "nodes": [], "finish_ts": 3}', TraceFormatError),
        (b'{"hello": "world"}', TraceFormatError),
        (b"\x1f\x8b\x08\x00garbage-not-deflate", TraceCorruptError),
        (b'{"traceEvents": [{"ph": "X", "na', TraceCorruptError),
    ],
    ids=["empty", "csv", "chakra-like", "no-events", "corrupt-gzip", "cut-in-first-event"],
)
def test_non_traces_are_refused_clearly(tmp_path: Path, content: bytes, error: type[Exception]) -> None:
    path = tmp_path / "input.json"
    path.write_bytes(content)
    with pytest.raises(error) as info:
        parse(path)
    assert str(path) in info.value.render()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceNotFoundError):
        parse(tmp_path / "nope.json")
    with pytest.raises(TraceNotFoundError):
        parse(tmp_path)


def test_chakra_execution_trace_is_refused() -> None:
    path = shared_trace(CHAKRA)
    with pytest.raises(TraceFormatError, match="Chakra execution trace"):
        parse(path)


# --------------------------------------------------------------------------- real traces

#: raw category → canonical kind, written out independently of the parser's own table
EXPECTED_KIND = {
    "cpu_op": "cpu_op", "operator": "cpu_op", "user_annotation": "annotation", "gpu_user_annotation": "gpu_annotation",
    "python_function": "python", "cuda_runtime": "runtime", "runtime": "runtime", "mtia_runtime": "runtime",
    "cuda_driver": "driver", "kernel": "kernel", "mtia_ccp_events": "kernel", "gpu_memcpy": "memcpy",
    "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset", "cuda_sync": "sync", "overhead": "overhead",
    "cpu_instant_event": "instant",
}


def _independent_counts(path: Path) -> tuple[Counter[str], int, int]:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        raw = fh.read().decode("utf-8")
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError:
        # a damaged header (GPUPuzzlers' ``{ {`` before the device properties): decode the events
        # array on its own, as the reader salvages it, so the counts still come from plain json
        start = raw.index("[", raw.index('"traceEvents"'))
        doc, _ = json.JSONDecoder().raw_decode(raw, start)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kinds: Counter[str] = Counter()
    memory = flows = 0
    for e in events:
        ph, cat = e.get("ph"), str(e.get("cat") or "").lower()
        if ph == "X" and cat != "trace":
            kinds[EXPECTED_KIND.get(cat, "other")] += 1
        elif ph in ("i", "I"):
            if e.get("name") == "[memory]":
                memory += 1
            elif str(e.get("pid")) not in ("", "Traces", "Spans"):
                kinds["instant"] += 1
        elif ph in ("s", "f"):
            flows += 1
    return kinds, memory, flows


REAL = [p for p in shared_kineto_traces() if not str(p).endswith("benchmark_simple_add_et.json.gz")]


#: the two largest real traces: counting their raw JSON in Python takes most of this test's time
SLOW_COUNTS = {
    "hta/tests/data/df_index_resolver/df_index_resolver.json.gz",
    "hta/tests/data/mtia_trace_single_rank/mtia_rank_0.json.gz",
}


@pytest.mark.parametrize("path", shared_trace_params(REAL, SLOW_COUNTS))
def test_real_trace_counts_match_the_raw_json(path: Path) -> None:
    assert detect_format(path) == "kineto"
    t = read_kineto(path)
    t.validate()
    kinds, memory, _ = _independent_counts(path)
    assert Counter(t.kind_counts()) == kinds
    assert t.memory.height == memory
    assert not t.info.truncated
    assert t.events["dur_ns"].min() is None or t.events["dur_ns"].min() >= 0
    # every link joins a launch call to GPU work
    kinds_by_id = dict(zip(t.events["event_id"].to_list(), t.events["kind"].to_list(), strict=True))
    for launch, gpu in t.links.select("launch_event_id", "gpu_event_id").head(200).iter_rows():
        assert kinds_by_id[launch] in ("runtime", "driver")
        assert kinds_by_id[gpu] in ("kernel", "memcpy", "memset", "sync")


def test_real_ns_resolution_trace_keeps_sub_microsecond_digits() -> None:
    t = read_kineto(shared_trace("hta/tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    assert (t.events["start_ns"] % 1000 != 0).sum() > 0
    # ROCm: streams on stream 0, device 2, AMD vendor
    kernels = t.events.filter(kind="kernel")
    assert set(kernels["stream"].to_list()) == {0}
    assert t.devices.filter(pl.col("device") == 2)["vendor"].item() == "amd"


def test_real_link_rates() -> None:
    """Nearly every GPU activity of a CUDA trace links back to its launch call."""
    t = read_kineto(shared_trace("hta/tests/data/trace_diff/control/control.json.gz"))
    gpu = t.events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    linked = gpu.join(t.links, left_on="event_id", right_on="gpu_event_id", how="semi")
    assert linked.height / gpu.height > 0.99


def test_real_cuda_graph_replay_fans_out() -> None:
    t = read_kineto(shared_trace("tracelens/inference/vllm_decode_full/graph_execution.json.gz"))
    fan = t.links.group_by("launch_event_id").len().sort("len", descending=True)
    assert fan["len"][0] > 20
    launch = fan["launch_event_id"][0]
    assert "Graph" in t.events.filter(pl.col("event_id") == launch)["name"].item()


def test_real_fwdbwd_flows_bind_to_ops() -> None:
    t = read_kineto(shared_trace("hta/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"))
    fb = t.flows.filter(flow_kind="fwdbwd")
    assert fb.height > 0
    bound = fb.filter(pl.col("src_event_id").is_not_null() & pl.col("dst_event_id").is_not_null())
    assert bound.height / fb.height > 0.95


def test_shared_traces_folder_is_present_or_skipped() -> None:
    if not SHARED_TRACES.exists():
        pytest.skip("../shared/traces is absent: real-trace tests skipped")
    assert REAL, "expected real Kineto traces under ../shared/traces"


@pytest.mark.parametrize("chunk_bytes", [600, 16 * 1024 * 1024], ids=["small-chunks", "one-chunk"])
def test_damage_in_the_middle_keeps_events_on_both_sides(tmp_path: Path, chunk_bytes: int) -> None:
    events = [_x("cpu_op", f"op{i}", 1000 + i * 10, 5, **{"External id": i}) for i in range(60)]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "t"})
    at = text.index('"op30"')
    damaged = text[:at] + '"op30 \x00 ]} broken' + text[at + 6 :]  # unterminated string eats the event
    path = tmp_path / "damaged.json"
    path.write_text(damaged)
    t = read_kineto(path, chunk_bytes=chunk_bytes)
    names = set(t.events["name"].to_list())
    assert {"op0", "op29", "op31", "op59"} <= names or {"op0", "op29", "op32", "op59"} <= names
    assert 55 <= t.events.height < 60
    assert not t.info.truncated
    assert any("damaged" in w for w in t.info.warnings)


# --------------------------------------------------------------------------- canonical order


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.integers(0, 3), st.sampled_from(["a", "b", "", None]), st.integers(0, 2)),
        max_size=60,
    ),
    st.booleans(),
)
def test_canonical_sort_order_equals_a_full_multi_key_sort(rows: list[tuple[Any, ...]], first_descending: bool) -> None:
    """The cheap order (first key, then only its ties by every key) is the stable multi-key sort,
    nulls last, whatever the ties, nulls and duplicates."""
    from tracekit.schema import _sort_order

    schema = {"start_ns": pl.Int64, "dur_ns": pl.Int64, "name": pl.String, "_order": pl.Int64}
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    keys = list(schema)
    descending = [first_descending, True, False, False]
    expected = frame.select(pl.arg_sort_by(keys, descending=descending, nulls_last=True, maintain_order=True)).to_series()
    assert _sort_order(frame, keys, descending).to_list() == expected.to_list()


def test_finalize_events_is_the_same_on_a_concatenation_of_many_frames() -> None:
    """A frame made of many chunks (a parser's per-table parts, concatenated without a copy)
    sorts into the same table as the same rows in one chunk; all-null columns come out
    null with their canonical dtype, helper columns in ``keep`` survive, others are dropped."""
    from tracekit.schema import EVENTS, finalize_events

    parts = [
        pl.DataFrame({"kind": ["kernel", "cpu_op"], "name": ["b", "a"], "start_ns": [5, 5], "dur_ns": [1, 1],
                      "pid": [1, 1], "memcpy_kind": [None, None], "_helper": [7, 8]}),
        pl.DataFrame({"kind": ["memcpy"], "name": ["c"], "start_ns": [None], "dur_ns": [2],
                      "pid": [2], "memcpy_kind": ["HtoD"], "_helper": [9]}),
        pl.DataFrame({"kind": ["runtime", "runtime"], "name": ["z", "y"], "start_ns": [1, 5], "dur_ns": [0, 3],
                      "pid": [None, 1], "memcpy_kind": [None, None], "_helper": [10, 11]}),
    ]
    chunked = pl.concat(parts, how="vertical_relaxed", rechunk=False).with_row_index("_order")
    assert chunked["name"].n_chunks() == 3
    got = finalize_events(chunked, keep=("_helper",))
    want = finalize_events(chunked.rechunk(), keep=("_helper",))
    assert got.equals(want)
    assert got["name"].to_list() == ["z", "y", "a", "b", "c"]
    assert got["event_id"].to_list() == [0, 1, 2, 3, 4]
    assert got["end_ns"].to_list() == [1, 8, 6, 6, None]
    assert got["_helper"].to_list() == [10, 11, 8, 7, 9]
    assert got.select(EVENTS.names).schema == EVENTS.polars_schema
    assert got["memcpy_kind"].to_list() == [None, None, None, None, "HtoD"]
    assert got["tid"].null_count() == 5
    assert "_order" not in got.columns


def test_finalize_events_with_name_positions_and_a_given_order() -> None:
    """Names given as positions in the sorted distinct names (the Kineto parser's encoding)
    sort and come out exactly as the names themselves, and an order from canonical_order
    gives the same table as the one finalize_events computes."""
    from tracekit.schema import canonical_order, finalize_events

    text = pl.DataFrame({
        "kind": ["cpu_op"] * 5, "name": ["zeta", "alpha", "mid", "alpha", ""], "start_ns": [3, 3, 3, 1, 3],
        "dur_ns": [2, 2, 2, 1, 2], "pid": [1] * 5, "_order": [0, 1, 2, 3, 4],
    })
    want = finalize_events(text)
    assert want["name"].to_list() == ["alpha", "", "alpha", "mid", "zeta"]
    names = text["name"].unique().sort()
    coded = text.with_columns(names.search_sorted(text["name"]).cast(pl.UInt32).alias("name"))
    assert finalize_events(coded, names=names).equals(want)
    assert finalize_events(coded, names=names, order=canonical_order(coded)).equals(want)
    assert finalize_events(text, order=canonical_order(text)).equals(want)


def test_collective_group_args_are_kept(tmp_path: Path) -> None:
    comms = {"Collective name": "allreduce", "Process Group Name": "3", "Process Group Ranks": "[0, 2, 4, 6]",
             "Group size": 4, "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float"}
    events = [
        _x("cpu_op", "record_param_comms", 1000, 10, **{"External id": 9, "Seq": 41, **comms}),
        _x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1020, 30, pid=0, tid=7,
           **{"External id": 9, "correlation": 4, "device": 0, "stream": 9, "seq": 41, **comms,
              "Process Group Ranks": [0, 2, 4, 6]}),
        # an older vintage: no sequence number; a negative size is not a size
        _x("kernel", "ncclKernel_Broadcast_RING_LL", 1100, 5, pid=0, tid=7,
           **{"correlation": 5, "device": 0, "stream": 9, "Collective name": "broadcast", "Process Group Name": "0",
              "Group size": -1}),
        _x("kernel", "gemm", 1200, 5, pid=0, tid=7, **{"correlation": 6, "device": 0, "stream": 7}),
    ]
    t = read_kineto(write_trace(tmp_path / "t.json", events))
    t.validate()
    cols = ["name", "process_group", "group_ranks", "group_size", "collective_seq", "message_elements"]
    rows = [tuple(r) for r in t.events.sort("start_ns").select(cols).iter_rows()]
    assert rows == [
        ("record_param_comms", "3", "[0,2,4,6]", 4, 41, 1024),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "3", "[0,2,4,6]", 4, 41, 1024),
        ("ncclKernel_Broadcast_RING_LL", "0", None, None, None, None),
        ("gemm", None, None, None, None, None),
    ]


def test_real_nccl_trace_keeps_process_groups() -> None:
    t = parse(shared_trace("hta/tests/data/nccl_parser_config/nccl_data.json.gz"))
    kernels = t.events.filter(pl.col("name").str.starts_with("ncclKernel"))
    assert kernels.height == 21
    assert kernels["process_group"].to_list() == ["0"] * 21
    assert set(kernels["group_ranks"].to_list()) == {"[0,1]"}
    assert set(kernels["group_size"].to_list()) == {2}
    assert kernels["message_elements"].null_count() == 0
    # this vintage (PyTorch 2.0) records no sequence number
    assert kernels["collective_seq"].null_count() == 21


@pytest.mark.parametrize("pure", ["0", "1"])
def test_numeric_ids_in_the_temporary_label_range_are_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pure: str
) -> None:
    # string pids/tids are numbered through temporary ids at -2**62 and below; a trace's own
    # numeric id down there (the fuzzer's pid -2**63 crashed the parse) is read as a label
    # too, and never mistaken for another label's temporary id
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", pure)
    events = [
        _x("cpu_op", "a", 10, 5, pid=-(2**63), tid=1),
        _x("cpu_op", "b", 12, 5, pid="Spans", tid=-(2**62) - 1),
        _x("cpu_op", "c", 13, 1, pid=7, tid="stream 7"),
    ]
    t = read_kineto(write_trace(tmp_path / "t.json", events))
    # labels numbered -1, -2, ... in sorted order of their text
    assert sorted(t.events.select("name", "pid", "tid").rows()) == [("a", -2, 1), ("b", -3, -1), ("c", 7, -4)]


def test_thread_names_with_no_ascii_stream_number_are_plain_threads(tmp_path: Path) -> None:
    # a Unicode digit or a number past int64 after "stream" once ended the parse in an error
    def meta(tid: int, label: str) -> dict[str, Any]:
        return {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": label}}

    events = [
        meta(7, "stream \u0663"),
        meta(8, "stream 99999999999999999999"),
        meta(9, " Stream 12 "),
        _x("kernel", "k", 1, 2, pid=1, tid=9, correlation=1),
    ]
    threads = read_kineto(write_trace(tmp_path / "t.json", events)).threads
    rows = {r["thread_name"]: (r["pid"], r["tid"], r["device"], r["stream"]) for r in threads.rows(named=True)}
    assert rows == {
        "stream \u0663": (1, 7, None, None),
        "stream 99999999999999999999": (1, 8, None, None),
        "Stream 12": (None, None, 1, 12),
    }


def test_launch_flows_link_what_correlation_ids_do_not(tmp_path: Path) -> None:
    """A launch flow links a launch call to a GPU activity where no correlation id does; a
    flow between other kinds, or to a GPU activity a correlation id already links, adds none."""
    events = [
        _x("cuda_runtime", "cudaLaunchKernel", 1000, 5, correlation=1),
        _x("kernel", "k_corr", 1010, 10, pid=0, tid=7, correlation=1, device=0, stream=7),
        _x("cuda_runtime", "cudaLaunchKernel", 1020, 5),  # no correlation id: only its flow links it
        _x("kernel", "k_flow", 1030, 10, pid=0, tid=7, device=0, stream=7),
        _x("cpu_op", "aten::add", 1040, 5),
        _x("kernel", "k_from_op", 1050, 10, pid=0, tid=7, device=0, stream=7),
        {"ph": "s", "id": 1, "pid": 10, "tid": 11, "ts": 1000, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 1010, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "s", "id": 2, "pid": 10, "tid": 11, "ts": 1020, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 2, "pid": 0, "tid": 7, "ts": 1030, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "s", "id": 3, "pid": 10, "tid": 11, "ts": 1040, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 3, "pid": 0, "tid": 7, "ts": 1050, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "s", "id": 4, "pid": 10, "tid": 11, "ts": 1020, "cat": "ac2g", "name": "ac2g"},  # no end
    ]
    t = read_kineto(write_trace(tmp_path / "t.json", events))
    names = t.events.get_column("name")
    got = [
        (names[row["launch_event_id"]], names[row["gpu_event_id"]], row["link_source"], row["correlation"])
        for row in t.links.iter_rows(named=True)
    ]
    assert got == [("cudaLaunchKernel", "k_corr", "correlation", 1), ("cudaLaunchKernel", "k_flow", "flow", None)]


@pytest.mark.parametrize("pure", ["0", "1"])
def test_copy_and_sync_kinds_land_on_their_rows_in_any_chunking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pure: str
) -> None:
    # a memcpy's direction comes from its name, else from a ``kind`` argument that names one;
    # a sync row's kind from its ``cuda_sync_kind`` argument, else from its name; each value is
    # worked out on the flagged rows of a chunk and put back at its row (every other row null)
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", pure)
    events = [
        _x("cpu_op", "op0", 10, 1),
        _x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20, 2, pid=0, tid=7, kind="DtoH"),
        _x("cpu_op", "op1", 30, 1),
        _x("gpu_memcpy", "Memcpy", 40, 2, pid=0, tid=7, kind="DtoH"),
        _x("cuda_sync", "Stream Sync", 50, 3, pid=0, tid=7),
        _x("gpu_memcpy", "Memcpy", 60, 2, pid=0, tid=7, kind="1"),
        _x("cuda_sync", "whatever", 70, 3, pid=0, tid=7, cuda_sync_kind="Event Sync"),
        _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 80, 2, pid=0, tid=7),
        _x("cuda_sync", "Foo", 90, 3, pid=0, tid=7),
        _x("kernel", "k", 100, 5, pid=0, tid=7),
    ]
    path = write_trace(tmp_path / "t.json", events)
    columns = ["name", "memcpy_kind", "src_memory", "dst_memory", "sync_kind"]
    whole = read_kineto(path).events.sort("start_ns").select(columns)
    assert whole.rows() == [
        ("op0", None, None, None, None),
        ("Memcpy HtoD (Pinned -> Device)", "HtoD", "pinned", "device", None),
        ("op1", None, None, None, None),
        ("Memcpy", "DtoH", "unknown", "unknown", None),
        ("Stream Sync", None, None, None, "stream_sync"),
        ("Memcpy", "unknown", "unknown", "unknown", None),
        ("whatever", None, None, None, "event_sync"),
        ("Memcpy DtoD (Device -> Device)", "DtoD", "device", "device", None),
        ("Foo", None, None, None, "unknown"),
        ("k", None, None, None, None),
    ]
    for chunk_bytes in (200, 400):  # the rows cut into several chunks: the same table
        assert read_kineto(path, chunk_bytes=chunk_bytes).events.sort("start_ns").select(columns).equals(whole)


#: the copy-name patterns in Python's ``re`` for ASCII text: the classes spelled out as what
#: polars' (Unicode) ``\w`` and ``\s`` match among ASCII characters (Python's own ``\s`` also
#: matches \x1c-\x1f, polars' does not)
_ASCII_DIRECTION = re.compile(r"HtoD|DtoH|DtoD|HtoH|PtoP")
_ASCII_SOURCE = re.compile(r"\(([0-9A-Za-z_]+)[\t\n\x0b\x0c\r ]*->")
_ASCII_DESTINATION = re.compile(r"->[\t\n\x0b\x0c\r ]*([0-9A-Za-z_]+)\)")


def _copy_name_by_re(text: str) -> tuple[str | None, str, str, str]:
    """What an ASCII memcpy name says, read by Python's ``re``: (direction, memcpy kind,
    source memory, destination memory)."""
    from tracekit.schema import MEMORY_KIND

    words = set(MEMORY_KIND.categories.to_list())

    def word(pattern: re.Pattern[str]) -> str:
        found = pattern.search(text.lower())
        return found.group(1) if found is not None and found.group(1) in words else "unknown"

    found = _ASCII_DIRECTION.search(text)
    direction = found.group(0) if found else None
    return direction, direction or "unknown", word(_ASCII_SOURCE), word(_ASCII_DESTINATION)


def test_copy_names_read_by_polars_as_by_python_re() -> None:
    # polars' regular expressions and Python's ``re`` read an ASCII memcpy name alike,
    # whitespace classes included (Python's own \s matches \x1c, polars' does not)
    from tracekit.parsers._kineto_copies import copy_names_said

    names = pl.Series("name", [
        "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoD (Device -> Device)",
        "Memcpy PtoP (Device -> Device)", "memcpy htod (pageable -> device)", "Memcpy", "", "(->)", "( -> )",
        "x (Managed\t\x0b->\n\rArray) y", "(device\x1c-> pinned)", "(device ->\x1cpinned)", "(Dev_1 -> 2x)",
        "HtoDtoH (Pinned->Pageable)(Device -> Managed)", "(a (device -> pinned)", "(device -> pinned",
        "DtoHHtoD", "Memcpy HtoD (Devicé -> Device)", "(UNKNOWN -> unknown)",
    ])
    said = copy_names_said(names)
    assert said.row(0) == ("HtoD", "HtoD", "pageable", "device")
    assert said.row(9) == (None, "unknown", "managed", "array")
    assert said.row(10) == (None, "unknown", "unknown", "pinned")
    assert said.row(17) == ("HtoD", "HtoD", "unknown", "device")  # (a word that is no memory kind)
    ascii_rows = [i for i, name in enumerate(names.to_list()) if name.isascii()]
    assert [said.row(i) for i in ascii_rows] == [_copy_name_by_re(names[i]) for i in ascii_rows]


def test_duration_of_complete_events_only_and_never_negative() -> None:
    # dur_ns: a complete event's duration, 0 when it has none or a negative one; every other
    # row's 0 (for integer durations by one comparison instead of a fill and a clip)
    from tracekit.parsers._kineto_events import event_exprs

    frame = pl.DataFrame(
        {
            "_complete": [True, True, True, True, False, None, False],
            "dur": [5, None, -3, 0, 7, 9, None],
        },
        schema={"_complete": pl.Boolean, "dur": pl.Int64},
    )
    have = frozenset(frame.columns)
    (made,) = [e for e in event_exprs(have, {"dur": pl.Int64()}) if str(e).endswith('"dur_ns")')]
    got = frame.select(made)
    assert got.schema == {"dur_ns": pl.Int64}
    assert got["dur_ns"].to_list() == [5, 0, 0, 0, 0, 0, 0]
    floats = frame.with_columns(pl.col("dur").cast(pl.Float64))
    (made,) = [e for e in event_exprs(have, {"dur": pl.Float64()}) if str(e).endswith('"dur_ns")')]
    assert floats.select(made)["dur_ns"].to_list() == [5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("odd", ["ASCII", "Ünïcode"])
def test_categories_in_any_case_and_the_trace_span(tmp_path: Path, odd: str) -> None:
    # categories are matched lower-cased (by Python for ASCII, by polars otherwise: one
    # non-ASCII category sends the chunk's categories through polars); a complete event in a
    # category named "trace" in any case is the profiler's own span, not an event; an instant
    # on a profiler track ("Traces", "Spans", "") is not shown
    events = [
        _x("Kernel", "k", 10, 5, pid=0, tid=7),
        _x("CPU_OP", "op", 20, 5),
        _x("Trace", "PyTorch Profiler (0)", 0, 100),
        _x("TRACE", "another span", 0, 100),
        _x(odd, "odd", 30, 5),
        {"ph": "X", "name": "no category", "pid": 10, "tid": 11, "ts": 40, "dur": 5},
        {"ph": "i", "cat": "Trace", "name": "mark", "pid": 10, "tid": 11, "ts": 50, "s": "t"},
        {"ph": "i", "cat": "cpu_instant_event", "name": "hidden", "pid": "Traces", "tid": 11, "ts": 60, "s": "t"},
    ]
    t = read_kineto(write_trace(tmp_path / "t.json", events))
    kinds = dict(t.events.select("name", "kind").iter_rows())
    assert kinds == {"k": "kernel", "op": "cpu_op", "odd": "other", "no category": "other", "mark": "instant"}
