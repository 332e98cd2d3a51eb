"""The Nsight Systems SQLite reader (tracekit.parsers.nsight).

Two kinds of tests:

* synthetic exports built in ``tmp_path`` by :func:`build_export` (the tables and columns
  the reader uses, in the layout nsys writes), with exact expected values;
* the real exports staged in ``../shared/traces/nsight`` (nsys 2022.2, 2024.5, 2026.2),
  checked against direct SQL on the same files.  They skip when that folder is absent.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.errors import ExternalToolError, TraceCorruptError, TraceFormatError
from tracekit.parsers import detect_format, parse
from tracekit.parsers.nsight import read_nsight, read_nsys_rep
from tracekit.schema import TraceTables


def shared_traces() -> Path:
    """``../shared/traces`` beside the repository (absent outside the workspace)."""
    return Path(__file__).resolve().parents[1].parent / "shared" / "traces"


NSIGHT = shared_traces() / "nsight"
SAXPY = NSIGHT / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
CLOVERLEAF = NSIGHT / "pipit" / "perlmutter-cloverleaf-cuda.sqlite"
H100 = NSIGHT / "nsys-ai" / "h100_2gpu_1s.sqlite"
REAL_EXPORTS = [SAXPY, CLOVERLEAF, H100]
NSYS_REPORTS = sorted((NSIGHT / "jax-toolbox").glob("*.nsys-rep")) if NSIGHT.is_dir() else []

needs_shared = pytest.mark.skipif(
    not NSIGHT.is_dir(), reason="real Nsight exports not available: ../shared/traces/nsight is absent"
)

# ----------------------------------------------------------------------------------------
# a synthetic export

EPOCH = 1_000_000_000_000  # TARGET_INFO_SESSION_START_TIME.utcEpochNs of the synthetic export
NA = 4294967295


def gtid(pid: int, tid: int) -> int:
    """A serialized globalTid (vm 1, as nsys writes for ordinary captures)."""
    return (1 << 48) | (pid << 24) | tid


def gpid(pid: int) -> int:
    return gtid(pid, 0)


STRINGS = {
    1: "cudaLaunchKernel_v7000",
    2: "cudaMemcpyAsync_v3020",
    3: "cudaStreamSynchronize_v3020",
    4: "cuLaunchKernel",
    5: "void gemm<float>(float *)",
    6: "gemm",
    7: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)",
    8: "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    9: "main thread",
    10: "registered range",
    11: "ioctl",
    12: "CUPTI: Buffer flush",
    13: "cudaMemsetAsync_v3020",
    14: "cudaDeviceSynchronize_v3020",
    15: "cudaMalloc_v3020",
    16: "cudaMalloc",
    17: "Command Buffer Full",
}

TABLES: dict[str, Sequence[str]] = {
    "StringIds": ("id", "value"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue", "callchainId",
    ),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
        "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread",
        "staticSharedMemory", "dynamicSharedMemory",
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
        "srcKind", "dstKind",
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "value", "bytes", "memKind",
    ),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "syncType", "eventId",
    ),
    "CUPTI_ACTIVITY_KIND_OVERHEAD": (
        "start", "end", "eventClass", "globalTid", "correlationId", "nameId", "overheadType",
    ),
    "NVTX_EVENTS": (
        "start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "endGlobalTid", "textId",
        "domainId",
    ),
    "OSRT_API": ("start", "end", "eventClass", "globalTid", "nameId", "returnValue", "nestingLevel", "callchainId"),
    "PROFILER_OVERHEAD": ("start", "end", "globalTid", "nameId", "returnValue"),
    "ThreadNames": ("nameId", "priority", "globalTid"),
    "PROCESSES": ("globalPid", "pid", "name"),
    "TARGET_INFO_GPU": ("vmId", "id", "name", "totalMemory", "smCount", "computeMajor", "computeMinor"),
    "TARGET_INFO_SESSION_START_TIME": ("utcEpochNs", "utcTime", "localTime"),
}  # fmt: skip

#: the synthetic capture: two processes (pid 100 with threads 100 and 101, pid 200)
ROWS: dict[str, list[tuple[Any, ...]]] = {
    "StringIds": sorted(STRINGS.items()),
    "CUPTI_ACTIVITY_KIND_RUNTIME": [
        (1000, 1100, 0, gtid(100, 100), 1, 1, 0, None),  # cudaLaunchKernel → K1
        (1000, 1090, 0, gtid(200, 200), 1, 1, 0, None),  # same correlation id, other process → K2
        (1000, 1100, 67, gtid(100, 100), 1, 1, 0, 0),  # backtrace duplicate: dropped
        (1200, 1300, 0, gtid(100, 100), 2, 2, 0, None),  # cudaMemcpyAsync → M1
        (1400, 1500, 0, gtid(100, 101), 3, 13, 0, None),  # cudaMemsetAsync on thread 101
        (1600, 2000, 0, gtid(100, 100), 4, 3, 0, None),  # cudaStreamSynchronize → S1
        (2100, 2200, 1, gtid(200, 200), 5, 4, 0, None),  # cuLaunchKernel (driver) → K3
        (2300, 2400, 0, gtid(200, 200), 6, 14, 0, None),  # cudaDeviceSynchronize → S2
        (2500, 2600, 0, gtid(100, 100), 7, 15, 0, None),  # cudaMalloc: no GPU work
    ],
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        (1150, 1650, 0, 1, 7, 1, gpid(100), 5, 6, 4, 2, 1, 128, 1, 1, 32, 1024, 2048),  # K1
        (1100, 1400, 1, 1, 13, 1, gpid(200), 5, 6, 1, 1, 1, 64, 2, 1, 16, 0, 0),  # K2
        (2250, 2350, 1, 1, 13, 5, gpid(200), 7, 8, 8, 1, 1, 256, 1, 1, 64, 0, 512),  # K3 (NCCL)
        (3000, 3100, 0, 1, 7, 99, gpid(100), 999, 6, 1, 1, 1, 32, 1, 1, 8, None, None),  # K4: orphan, no demangled
    ],
    "CUPTI_ACTIVITY_KIND_MEMCPY": [(1250, 1350, 0, 1, 7, 2, gpid(100), 4096, 1, 0, 2)],
    "CUPTI_ACTIVITY_KIND_MEMSET": [(1450, 1460, 0, 1, 7, 3, gpid(100), 0, 256, 2)],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [
        (1610, 1990, 0, 1, 7, 4, gpid(100), 3, NA),  # stream sync
        (2310, 2390, 1, 1, NA, 6, gpid(200), 4, NA),  # context sync: stream n/a
    ],
    "CUPTI_ACTIVITY_KIND_OVERHEAD": [(1010, 1020, 103, gtid(100, 100), 1, 17, 8)],
    "NVTX_EVENTS": [
        (10, None, 75, None, None, None, "MyDomain", gtid(100, 100), None, None, 5),
        (900, 2700, 59, None, None, None, "step 1", gtid(100, 100), None, None, 0),
        (950, 1120, 59, None, None, None, None, gtid(100, 100), None, 10, 5),
        (1000, 2500, 60, 1, None, None, "async range", gtid(200, 200), gtid(200, 201), None, 0),
        (1005, 1095, 59, None, None, None, "aten::mm, seq = 42, op_id = 7", gtid(100, 100), None, None, 0),
        (1700, None, 34, None, None, None, "checkpoint", gtid(100, 100), None, None, 0),
        (2800, None, 59, None, None, None, "never ends", gtid(100, 100), None, None, 0),
    ],
    "OSRT_API": [(1610, 1980, 27, gtid(100, 100), 11, 0, 0, None)],
    "PROFILER_OVERHEAD": [(50, 60, gtid(100, 100), 12, 0)],
    "ThreadNames": [(9, 10, gtid(100, 100))],
    "PROCESSES": [(gpid(100), 100, "python"), (gpid(200), 200, "python"), (gpid(300), 300, "sshd")],
    "TARGET_INFO_GPU": [(1 << 48, 0, "NVIDIA H100 80GB HBM3", 85_000_000_000, 132, 9, 0)],
    "TARGET_INFO_SESSION_START_TIME": [(EPOCH, "2026-01-01T00:00:00", "2026-01-01T00:00:00")],
}

ENUMS = {
    "ENUM_CUDA_MEMCPY_OPER": [(0, "CUDA_MEMCPY_KIND_UNKNOWN"), (1, "CUDA_MEMCPY_KIND_HTOD"), (2, "CUDA_MEMCPY_KIND_DTOH")],
    "ENUM_CUDA_MEM_KIND": [(0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED"),
                           (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE")],
    "ENUM_CUPTI_SYNC_TYPE": [(1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE"),
                             (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE"),
                             (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE")],
    "ENUM_CUPTI_OVERHEAD_TYPE": [(3, "OVERHEAD_CUPTI_BUFFER_FLUSH"), (8, "OVERHEAD_COMMAND_BUFFER_FULL")],
}  # fmt: skip


def build_export(
    path: Path,
    *,
    legacy: bool = False,
    enums: dict[str, list[tuple[int, str]]] | None = None,
    drop_tables: Sequence[str] = (),
    drop_columns: dict[str, Sequence[str]] | None = None,
    extra_rows: dict[str, list[tuple[Any, ...]]] | None = None,
    export_params: dict[str, str] | None = None,
) -> Path:
    """Write a small Nsight-style SQLite export.

    ``legacy`` writes the 2022-era metadata table (EXPORT_META_DATA, schema 2.9.1) and
    no ENUM tables; otherwise META_DATA_EXPORT (3.25.0) and ``enums`` (default ENUMS).
    ``drop_tables``/``drop_columns`` leave parts out, as lazy or old exports do.
    """
    drop_columns = drop_columns or {}
    con = sqlite3.connect(path)
    for table, columns in TABLES.items():
        if table in drop_tables:
            continue
        keep = [i for i, c in enumerate(columns) if c not in drop_columns.get(table, ())]
        names = [columns[i] for i in keep]
        con.execute(f'CREATE TABLE "{table}" ({", ".join(f"{c!r}" for c in names)})'.replace("'", '"'))
        rows = [tuple(r[i] for i in keep) for r in ROWS.get(table, []) + (extra_rows or {}).get(table, [])]
        if rows:
            con.executemany(f'INSERT INTO "{table}" VALUES ({", ".join("?" * len(names))})', rows)
    meta = "EXPORT_META_DATA" if legacy else "META_DATA_EXPORT"
    schema = "2.9.1" if legacy else "3.25.0"
    product = "2022.2.1.31" if legacy else "2026.2.1.210"
    con.execute(f"CREATE TABLE {meta} (name TEXT, value TEXT)")
    params = {"EXPORT_SCHEMA_VERSION": schema, "EXPORT_PRODUCT_VERSION": product, **(export_params or {})}
    con.executemany(f"INSERT INTO {meta} VALUES (?, ?)", params.items())
    if not legacy:
        for table, values in (ENUMS if enums is None else enums).items():
            con.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
            con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", [(i, n, n.title()) for i, n in values])
    con.commit()
    con.close()
    return path


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return build_export(tmp_path / "synthetic.sqlite")


def rows_of(tables: TraceTables, kind: str) -> list[dict[str, Any]]:
    return tables.events.filter(pl.col("kind") == kind).sort("start_ns").to_dicts()


def by_name(tables: TraceTables, name: str) -> dict[str, Any]:
    found = tables.events.filter(pl.col("name") == name).to_dicts()
    assert len(found) == 1, (name, found)
    return found[0]


# ----------------------------------------------------------------------------------------
# synthetic: exact values


def test_synthetic_kinds_and_counts(export: Path) -> None:
    t = read_nsight(export)
    t.validate()
    assert t.kind_counts() == {
        "runtime": 7,
        "driver": 1,
        "kernel": 4,
        "memcpy": 1,
        "memset": 1,
        "sync": 2,
        "annotation": 4,
        "instant": 1,
        "os_call": 1,
        "overhead": 1,
        "other": 1,
    }
    assert t.events["event_id"].to_list() == list(range(t.events.height))
    starts = t.events["start_ns"].to_list()
    assert starts == sorted(starts)


def test_synthetic_times_are_epoch_based(export: Path) -> None:
    t = read_nsight(export)
    k1 = t.events.filter((pl.col("kind") == "kernel") & (pl.col("correlation") == 1) & (pl.col("pid") == 100))
    assert k1["start_ns"].item() == EPOCH + 1150
    assert k1["dur_ns"].item() == 500
    assert k1["end_ns"].item() == EPOCH + 1650
    assert t.info.start_ns == EPOCH + 50
    assert t.info.end_ns == EPOCH + 3100
    assert t.info.metadata["clock"] == "utc_epoch"


def test_synthetic_runtime_names_and_backtrace_rows(export: Path) -> None:
    t = read_nsight(export)
    runtime = t.events.filter(pl.col("kind") == "runtime")
    assert sorted(set(runtime["name"].to_list())) == [
        "cudaDeviceSynchronize",
        "cudaLaunchKernel",
        "cudaMalloc",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "cudaStreamSynchronize",
    ]
    driver = rows_of(t, "driver")
    assert [(d["name"], d["pid"], d["tid"], d["correlation"]) for d in driver] == [("cuLaunchKernel", 200, 200, 5)]
    memset_call = by_name(t, "cudaMemsetAsync")
    assert (memset_call["pid"], memset_call["tid"], memset_call["device"]) == (100, 101, None)


def test_synthetic_kernel_columns(export: Path) -> None:
    t = read_nsight(export)
    kernels = {(k["pid"], k["correlation"]): k for k in rows_of(t, "kernel")}
    k1 = kernels[(100, 1)]
    assert k1["name"] == "void gemm<float>(float *)"
    assert (k1["device"], k1["stream"], k1["tid"], k1["rank"]) == (0, 7, None, 0)
    assert (k1["grid_blocks"], k1["block_threads"]) == (8, 128)
    assert (k1["registers_per_thread"], k1["shared_memory_bytes"]) == (32, 3072)
    assert k1["collective"] is None
    k2 = kernels[(200, 1)]
    assert (k2["device"], k2["stream"], k2["rank"], k2["block_threads"]) == (1, 13, 1, 128)
    k3 = kernels[(200, 5)]
    assert k3["collective"] == "all_reduce"
    assert k3["shared_memory_bytes"] == 512
    k4 = kernels[(100, 99)]
    assert k4["name"] == "gemm"  # demangledName id missing from StringIds: shortName
    assert k4["shared_memory_bytes"] is None


def test_synthetic_memcpy_memset(export: Path) -> None:
    t = read_nsight(export)
    (m,) = rows_of(t, "memcpy")
    assert (m["name"], m["bytes"], m["memcpy_kind"], m["src_memory"], m["dst_memory"]) == (
        "[CUDA memcpy HtoD]",
        4096,
        "HtoD",
        "pageable",
        "device",
    )
    assert (m["pid"], m["tid"], m["device"], m["stream"]) == (100, None, 0, 7)
    (s,) = rows_of(t, "memset")
    assert (s["bytes"], s["dst_memory"], s["device"], s["stream"]) == (256, "device", 0, 7)


def test_synthetic_sync_rows(export: Path) -> None:
    t = read_nsight(export)
    s1, s2 = rows_of(t, "sync")
    assert (s1["name"], s1["sync_kind"], s1["pid"], s1["tid"], s1["device"], s1["stream"], s1["wait_stream"]) == (
        "Stream Sync",
        "stream_sync",
        100,
        100,  # the thread of the cudaStreamSynchronize call with the same (pid, correlationId)
        0,
        7,
        7,
    )
    assert (s2["sync_kind"], s2["pid"], s2["tid"], s2["device"], s2["stream"], s2["wait_stream"]) == (
        "context_sync",
        200,
        200,
        1,
        None,  # 4294967295 means "not applicable"
        None,
    )


def test_synthetic_links_join_on_pid_and_correlation(export: Path) -> None:
    t = read_nsight(export)
    ev = t.events.select("event_id", "kind", "name", "pid", "correlation")
    joined = (
        t.links.join(ev.rename(lambda c: "l_" + c), left_on="launch_event_id", right_on="l_event_id")
        .join(ev.rename(lambda c: "g_" + c), left_on="gpu_event_id", right_on="g_event_id")
        .sort("g_pid", "correlation", "g_kind")
    )
    assert joined["link_source"].unique().to_list() == ["correlation"]
    assert (joined["l_pid"] == joined["g_pid"]).all()
    assert (joined["l_correlation"] == joined["correlation"]).all()
    assert [(r["g_pid"], r["correlation"], r["l_name"], r["g_kind"]) for r in joined.to_dicts()] == [
        (100, 1, "cudaLaunchKernel", "kernel"),
        (100, 2, "cudaMemcpyAsync", "memcpy"),
        (100, 3, "cudaMemsetAsync", "memset"),
        (100, 4, "cudaStreamSynchronize", "sync"),
        (200, 1, "cudaLaunchKernel", "kernel"),
        (200, 5, "cuLaunchKernel", "kernel"),
        (200, 6, "cudaDeviceSynchronize", "sync"),
    ]
    assert any("1 of 6 GPU kernels/copies/memsets have no launching API call" in w for w in t.info.warnings)


def test_synthetic_nvtx(export: Path) -> None:
    t = read_nsight(export)
    ranges = {r["name"]: r for r in rows_of(t, "annotation")}
    assert set(ranges) == {"step 1", "registered range", "async range", "aten::mm, seq = 42, op_id = 7"}
    assert ranges["registered range"]["domain"] == "MyDomain"  # textId resolved, domain from eventType 75
    assert ranges["step 1"]["domain"] is None  # the default domain
    assert (ranges["step 1"]["pid"], ranges["step 1"]["tid"], ranges["step 1"]["dur_ns"]) == (100, 100, 1800)
    assert ranges["aten::mm, seq = 42, op_id = 7"]["sequence_nr"] == 42
    start_end = ranges["async range"]
    assert (start_end["pid"], start_end["tid"], start_end["dur_ns"], start_end["rank"]) == (200, 200, 1500, 1)
    (mark,) = rows_of(t, "instant")
    assert (mark["name"], mark["dur_ns"], mark["start_ns"]) == ("checkpoint", 0, EPOCH + 1700)
    assert "never ends" not in t.events["name"].to_list()
    assert any("1 NVTX ranges never ended" in w for w in t.info.warnings)


def test_synthetic_os_calls_and_overhead(export: Path) -> None:
    t = read_nsight(export)
    (call,) = rows_of(t, "os_call")
    assert (call["name"], call["pid"], call["tid"], call["dur_ns"]) == ("ioctl", 100, 100, 370)
    (overhead,) = rows_of(t, "overhead")
    assert (overhead["name"], overhead["start_ns"]) == ("CUPTI: Buffer flush", EPOCH + 50)
    # a CUDA-caused CUPTI overhead record is not profiler overhead
    (other,) = rows_of(t, "other")
    assert (other["name"], other["correlation"]) == ("Command Buffer Full", 1)


def test_synthetic_info_ranks_devices_threads(export: Path) -> None:
    t = read_nsight(export)
    info = t.info
    assert (info.format, info.format_version, info.producer) == ("nsys", "3.25.0", "nsys 2026.2.1.210")
    assert info.ranks == (0, 1)
    assert info.rank is None
    assert info.metadata["rank_pids"] == {"0": 100, "1": 200}
    assert info.metadata["rank_source"] == "pid_order"
    by_pid = t.events.group_by("pid").agg(pl.col("rank").unique()).sort("pid").rows()
    assert by_pid == [(100, [0]), (200, [1])]
    assert t.devices.rows() == [
        (0, "NVIDIA H100 80GB HBM3", "nvidia", 85_000_000_000, 9, 0, 132),
        (1, None, "nvidia", None, None, None, None),  # seen in events, not described
    ]
    threads = t.threads.to_dicts()
    assert {"pid": 100, "tid": 100, "device": None, "stream": None, "process_name": "python",
            "thread_name": "main thread"} in threads  # fmt: skip
    assert {"pid": 200, "tid": None, "device": None, "stream": None, "process_name": "python",
            "thread_name": None} in threads  # fmt: skip
    assert 300 not in t.threads["pid"].to_list()  # a process with no activity


def test_nvtx_domain_ids_are_per_process(tmp_path: Path) -> None:
    extra = {
        "NVTX_EVENTS": [
            (20, None, 75, None, None, None, "OtherDomain", gtid(200, 200), None, None, 5),
            (1100, 1200, 59, None, None, None, "in other domain", gtid(200, 200), None, None, 5),
        ]
    }
    t = read_nsight(build_export(tmp_path / "d.sqlite", extra_rows=extra))
    assert by_name(t, "in other domain")["domain"] == "OtherDomain"
    assert by_name(t, "registered range")["domain"] == "MyDomain"


def test_ranks_from_nvtx_thread_names(tmp_path: Path) -> None:
    names = {
        "NVTX_EVENTS": [
            (5, None, 39, None, None, None, "MPI Rank 3", gtid(100, 100), None, None, 0),
            (6, None, 39, None, None, None, "MPI Rank 1", gtid(200, 200), None, None, 0),
        ]
    }
    t = read_nsight(build_export(tmp_path / "r.sqlite", extra_rows=names))
    assert t.info.ranks == (1, 3)
    assert t.info.metadata["rank_source"] == "nvtx_thread_name"
    assert t.events.filter(pl.col("pid") == 100)["rank"].unique().to_list() == [3]
    assert ("MPI Rank 3",) in t.threads.filter(pl.col("tid") == 100).select("thread_name").rows()


def test_legacy_export_without_enum_tables(tmp_path: Path) -> None:
    modern = read_nsight(build_export(tmp_path / "modern.sqlite"))
    legacy = read_nsight(build_export(tmp_path / "legacy.sqlite", legacy=True))
    legacy.validate()
    assert (legacy.info.format_version, legacy.info.producer) == ("2.9.1", "nsys 2022.2.1.31")
    assert legacy.events.equals(modern.events)
    assert legacy.links.equals(modern.links)


def test_enum_tables_take_precedence(tmp_path: Path) -> None:
    swapped = {**ENUMS, "ENUM_CUDA_MEMCPY_OPER": [(1, "CUDA_MEMCPY_KIND_DTOH"), (2, "CUDA_MEMCPY_KIND_HTOD")]}
    t = read_nsight(build_export(tmp_path / "e.sqlite", enums=swapped))
    (m,) = rows_of(t, "memcpy")
    assert (m["memcpy_kind"], m["name"]) == ("DtoH", "[CUDA memcpy DtoH]")


def test_sync_api_name_overrides_contradicting_sync_type(tmp_path: Path) -> None:
    # schema 3.13 exports record cudaDeviceSynchronize with syncType 1 ("event sync")
    path = build_export(tmp_path / "s.sqlite")
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET syncType = 1 WHERE correlationId = 6")
    con.close()
    t = read_nsight(path)
    assert [s["sync_kind"] for s in rows_of(t, "sync")] == ["stream_sync", "context_sync"]
    assert any("contradicts their API call" in w for w in t.info.warnings)


def test_missing_tables_and_columns(tmp_path: Path) -> None:
    path = build_export(
        tmp_path / "lazy.sqlite",
        drop_tables=["TARGET_INFO_GPU", "OSRT_API", "PROFILER_OVERHEAD", "CUPTI_ACTIVITY_KIND_MEMSET", "PROCESSES"],
        drop_columns={
            "CUPTI_ACTIVITY_KIND_KERNEL": ["registersPerThread", "dynamicSharedMemory", "demangledName"],
            "CUPTI_ACTIVITY_KIND_MEMCPY": ["srcKind", "dstKind"],
            "NVTX_EVENTS": ["textId", "domainId"],
        },
    )
    t = read_nsight(path)
    t.validate()
    kernels = rows_of(t, "kernel")
    assert {k["name"] for k in kernels} == {"gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}
    assert all(k["registers_per_thread"] is None for k in kernels)
    (m,) = rows_of(t, "memcpy")
    assert (m["memcpy_kind"], m["src_memory"], m["dst_memory"]) == ("HtoD", None, None)
    assert "memset" not in t.kind_counts()
    assert [d["name"] for d in t.devices.to_dicts()] == [None, None]
    annotations = t.events.filter(pl.col("kind") == "annotation")
    assert annotations["domain"].null_count() == 4  # no domainId column: every range in the default domain
    assert annotations["name"].null_count() == 1  # the registered-string range has no text without textId


def test_sync_thread_from_global_tid_when_recorded(tmp_path: Path) -> None:
    path = build_export(tmp_path / "g.sqlite")
    with sqlite3.connect(path) as con:
        con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION ADD COLUMN globalTid INTEGER")
        con.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET globalTid = ? WHERE correlationId = 4", (gtid(100, 105),)
        )
    con.close()
    s1, s2 = rows_of(read_nsight(path), "sync")
    assert (s1["pid"], s1["tid"]) == (100, 105)  # the row's own globalTid wins
    assert (s2["pid"], s2["tid"]) == (200, 200)  # no globalTid: the correlated API call's thread


def test_path_with_uri_characters(tmp_path: Path) -> None:
    folder = tmp_path / "a dir #1"
    folder.mkdir()
    path = build_export(folder / "odd?name %20.sqlite")
    t = read_nsight(path)
    assert t.info.path == str(path)
    assert t.kind_counts()["kernel"] == 4


def test_session_relative_times_without_start_time(tmp_path: Path) -> None:
    t = read_nsight(build_export(tmp_path / "n.sqlite", drop_tables=["TARGET_INFO_SESSION_START_TIME"]))
    assert t.info.start_ns == 50
    assert t.info.metadata["clock"] == "session"
    assert any("session-relative" in w for w in t.info.warnings)


def test_ts_normalized_export_is_not_shifted_twice(tmp_path: Path) -> None:
    path = build_export(tmp_path / "n.sqlite", export_params={"EXPORT_PARAM_TIME_NORMALIZE": "true"})
    t = read_nsight(path)
    assert t.info.start_ns == 50
    assert t.info.metadata["clock"] == "utc_epoch"


def test_text_that_is_not_utf8(tmp_path: Path) -> None:
    path = build_export(tmp_path / "u.sqlite")
    with sqlite3.connect(path) as con:
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
            "VALUES (1500, 1600, 59, CAST(X'4142FF' AS TEXT), ?, 0)",
            (gtid(100, 100),),
        )
    con.close()
    t = read_nsight(path)
    assert "AB\ufffd" in t.events["name"].to_list()


def _read_counting_paths(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[TraceTables, dict[str, int]]:
    """Read ``path`` and return which path (arrow, sqlite3) answered its bulk queries."""
    from tracekit.parsers import _nsight_db

    seen: list[Any] = []
    init = _nsight_db.Db.__post_init__

    def spy(self: Any) -> None:
        seen.append(self)
        init(self)

    monkeypatch.setattr(_nsight_db.Db, "__post_init__", spy)
    tables = read_nsight(path)
    return tables, seen[0].paths


def _assert_same_tables(a: TraceTables, b: TraceTables) -> None:
    for name in ("events", "links", "flows", "devices", "threads", "counters", "memory"):
        assert a.table(name).equals(b.table(name), null_equal=True), name
    assert a.info == b.info


def test_arrow_reads_equal_sqlite3_reads(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("adbc_driver_sqlite")
    arrow, paths = _read_counting_paths(export, monkeypatch)
    assert paths["arrow"] > 0
    assert paths["sqlite3"] == 0
    monkeypatch.setenv("TRACEKIT_NSIGHT_ARROW", "0")
    plain, paths = _read_counting_paths(export, monkeypatch)
    assert paths["arrow"] == 0
    assert paths["sqlite3"] > 0
    _assert_same_tables(arrow, plain)


def test_reads_split_in_rowid_ranges_equal_whole_reads(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large table is read in one rowid range per background thread; the ranges, joined in
    order, give the same tables as one read and as the sqlite3 path."""
    pytest.importorskip("adbc_driver_sqlite")
    from tracekit.parsers import _nsight_db, nsight

    monkeypatch.setattr(nsight, "_PREFETCH_MIN_BYTES", 0)  # background reads however small the export
    monkeypatch.setattr(_nsight_db, "_SPLIT_ROWS", 1)  # every table with two rows or more is split
    ranges: list[str] = []
    background = _nsight_db.Db._background_query

    def spy(self: Any, sql: str, chosen: Any) -> Any:
        ranges.append(sql)
        return background(self, sql, chosen)

    monkeypatch.setattr(_nsight_db.Db, "_background_query", spy)
    split, paths = _read_counting_paths(export, monkeypatch)
    assert paths["arrow"] > 0
    assert paths["sqlite3"] == 0
    assert any("NVTX_EVENTS" in q and "rowid >=" in q for q in ranges), ranges
    monkeypatch.setenv("TRACEKIT_NSIGHT_ARROW", "0")
    plain, _ = _read_counting_paths(export, monkeypatch)
    _assert_same_tables(split, plain)


def test_an_indexed_table_is_not_read_in_rowid_ranges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an index, SQLite may walk the index for the whole read, so ranges of rowids
    would not give its row order: such a table is read in one query."""
    pytest.importorskip("adbc_driver_sqlite")
    from tracekit.parsers import _nsight_db, nsight

    path = build_export(tmp_path / "i.sqlite")
    with sqlite3.connect(path) as con:
        con.execute('CREATE INDEX nvtx_type ON NVTX_EVENTS ("eventType")')
    con.close()
    monkeypatch.setattr(nsight, "_PREFETCH_MIN_BYTES", 0)
    monkeypatch.setattr(_nsight_db, "_SPLIT_ROWS", 1)
    ranges: list[str] = []
    background = _nsight_db.Db._background_query

    def spy(self: Any, sql: str, chosen: Any) -> Any:
        ranges.append(sql)
        return background(self, sql, chosen)

    monkeypatch.setattr(_nsight_db.Db, "_background_query", spy)
    split, _ = _read_counting_paths(path, monkeypatch)
    assert not any("NVTX_EVENTS" in q and "rowid >=" in q for q in ranges), ranges
    assert any("CUPTI_ACTIVITY_KIND_KERNEL" in q and "rowid >=" in q for q in ranges), ranges
    monkeypatch.setenv("TRACEKIT_NSIGHT_ARROW", "0")
    plain, _ = _read_counting_paths(path, monkeypatch)
    _assert_same_tables(split, plain)


def test_damaged_text_falls_back_to_lenient_sqlite3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Invalid UTF-8 in a table makes its Arrow read fail validation; that table is read
    through sqlite3 (bytes replaced), the others stay on the Arrow path."""
    pytest.importorskip("adbc_driver_sqlite")
    path = build_export(tmp_path / "u.sqlite")
    with sqlite3.connect(path) as con:
        con.execute("UPDATE StringIds SET value = CAST(X'696F63FF746C' AS TEXT) WHERE id = 11")  # ioctl
    con.close()
    t, paths = _read_counting_paths(path, monkeypatch)
    assert paths["sqlite3"] >= 1
    assert paths["arrow"] >= 1
    assert "ioc\ufffdtl" in t.events["name"].to_list()


def test_mixed_column_types_read_like_sqlite3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite lets a column hold text in an INTEGER column; both paths give the same result."""
    path = build_export(tmp_path / "m.sqlite")
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 'seven' WHERE rowid = (SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    con.close()
    arrow, _ = _read_counting_paths(path, monkeypatch)
    monkeypatch.setenv("TRACEKIT_NSIGHT_ARROW", "0")
    plain, _ = _read_counting_paths(path, monkeypatch)
    _assert_same_tables(arrow, plain)


def test_empty_export(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.close()
    t = read_nsight(path)
    t.validate()
    assert t.events.height == 0
    assert t.info.ranks == (0,)


def test_file_is_opened_read_only(export: Path) -> None:
    before = export.read_bytes()
    export.chmod(stat.S_IRUSR)
    try:
        read_nsight(export)
    finally:
        export.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert export.read_bytes() == before
    assert sorted(p.name for p in export.parent.iterdir()) == [export.name]  # no journal or -wal files


def test_parse_dispatches_sqlite(export: Path) -> None:
    assert detect_format(export) == "nsys"
    assert parse(export).info.format == "nsys"


# ----------------------------------------------------------------------------------------
# refusals


def test_sqlite_that_is_not_nsight(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE songs (title TEXT, artist TEXT)")
    con.close()
    with pytest.raises(TraceFormatError) as err:
        read_nsight(path)
    assert err.value.path == str(path)
    assert "Nsight" in err.value.message


@pytest.mark.parametrize("damage", ["truncated", "garbage", "scribbled"])
def test_corrupt_sqlite(export: Path, tmp_path: Path, damage: str) -> None:
    data = bytearray(export.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = bytearray(b"SQLite format 3\x00" + bytes(range(256)) * 20)
    else:
        data[4096:] = b"\xa5" * (len(data) - 4096)
    bad = tmp_path / f"{damage}.sqlite"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceCorruptError) as err:
        parse(bad)
    assert err.value.path == str(bad)


@pytest.fixture
def no_nsys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """PATH holds only an empty folder, so no `nsys` can be found."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_nsys_rep_without_nsys(tmp_path: Path, no_nsys: None) -> None:
    rep = tmp_path / "report.nsys-rep"
    rep.write_bytes(b"\x00binary report")
    with pytest.raises(ExternalToolError) as err:
        read_nsys_rep(rep)
    text = str(err.value)
    assert "report.nsys-rep" in text
    assert f"nsys export --type sqlite --output {tmp_path / 'report.sqlite'} {rep}" in text
    assert f"tracekit analyze {tmp_path / 'report.sqlite'}" in text


@needs_shared
@pytest.mark.shared
@pytest.mark.parametrize("report", NSYS_REPORTS, ids=lambda p: p.name)
def test_real_nsys_rep_without_nsys(report: Path, no_nsys: None) -> None:
    assert detect_format(report) == "nsys-rep"
    with pytest.raises(ExternalToolError) as err:
        parse(report)
    assert report.name in str(err.value)
    assert "nsys export --type sqlite --output" in str(err.value)
    assert "tracekit analyze" in str(err.value)


def fake_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, export_body: str) -> None:
    """Put a stand-in ``nsys`` first on PATH.  ``export_body`` is Python run for ``nsys
    export``, with ``args`` (its arguments), ``report`` (the report's bytes) and ``output``
    (the path it must write) defined."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import shutil, sys\n"
        "args = sys.argv[1:]\n"
        "assert args[:3] == ['export', '--type', 'sqlite'], args\n"
        "report = open(args[-1], 'rb').read()\n"
        "output = args[args.index('--output') + 1]\n" + export_body
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))


def test_nsys_rep_with_nsys_on_path(export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in ``nsys`` that "exports" by copying the synthetic SQLite file."""
    fake_nsys(tmp_path, monkeypatch, f"shutil.copyfile({str(export)!r}, output)\n")
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00binary report")
    work = tmp_path / "work"
    t = read_nsys_rep(rep, work_dir=work)
    assert (work / "run.sqlite").exists()
    assert t.kind_counts()["kernel"] == 4
    t2 = read_nsys_rep(rep)  # into a temporary folder, removed afterwards
    assert t2.events.equals(t.events)


def test_reports_sharing_a_file_name_never_share_an_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two different ``run.nsys-rep`` in two folders, the second older than the first's
    export: each is exported on its own (the export folder is keyed by the report's bytes),
    and the export is renamed into place only when ``nsys`` succeeded."""
    import tracekit

    with_kernels = build_export(tmp_path / "with.sqlite")
    without = build_export(tmp_path / "without.sqlite", drop_tables=["CUPTI_ACTIVITY_KIND_KERNEL"])
    fake_nsys(
        tmp_path,
        monkeypatch,
        "if report == b'broken':\n"
        "    sys.exit('nsys: cannot read the report')\n"
        f"shutil.copyfile({str(with_kernels)!r} if report == b'first' else {str(without)!r}, output)\n",
    )
    first, second, broken = (tmp_path / d / "run.nsys-rep" for d in ("a", "b", "c"))
    for rep, content in ((first, b"first"), (second, b"second"), (broken, b"broken")):
        rep.parent.mkdir()
        rep.write_bytes(content)
    os.utime(second, (1_000_000, 1_000_000))  # older than any export written now

    assert tracekit.read_trace(first).kind_counts().get("kernel") == 4
    assert tracekit.read_trace(second).kind_counts().get("kernel", 0) == 0
    with pytest.raises(ExternalToolError, match="cannot read the report"):
        tracekit.read_trace(broken)
    exports = Path(os.environ["TRACEKIT_CACHE_DIR"]) / "exports"
    assert sorted(p.name for p in exports.rglob("*.sqlite")) == ["run.sqlite", "run.sqlite"]
    assert not list(exports.rglob("*partial*"))


# ----------------------------------------------------------------------------------------
# real exports against direct SQL


def sql(path: Path, query: str) -> Any:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(query).fetchone()[0]
    finally:
        con.close()


def has_table(path: Path, table: str) -> bool:
    return bool(sql(path, f"SELECT COUNT(*) FROM sqlite_master WHERE name = '{table}'"))


def count(path: Path, table: str, where: str = "1") -> int:
    return int(sql(path, f"SELECT COUNT(*) FROM {table} WHERE {where}")) if has_table(path, table) else 0


_CACHE: dict[Path, TraceTables] = {}


def load(path: Path) -> TraceTables:
    if path not in _CACHE:
        _CACHE[path] = read_nsight(path)
    return _CACHE[path]


real = pytest.mark.parametrize("path", REAL_EXPORTS, ids=lambda p: p.name)


@needs_shared
@pytest.mark.shared
@real
def test_real_export_loads(path: Path) -> None:
    t = load(path)
    t.validate()
    assert t.info.format == "nsys"
    assert t.info.format_version is not None
    assert t.info.producer is not None
    assert t.info.producer.startswith("nsys 20")
    assert t.events["event_id"].to_list() == list(range(t.events.height))


@needs_shared
@pytest.mark.shared
@real
def test_real_row_counts_match_sql(path: Path) -> None:
    counts = load(path).kind_counts()
    assert counts.get("kernel", 0) == count(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert counts.get("memcpy", 0) == count(path, "CUPTI_ACTIVITY_KIND_MEMCPY")
    assert counts.get("memset", 0) == count(path, "CUPTI_ACTIVITY_KIND_MEMSET")
    assert counts.get("sync", 0) == count(path, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    api = counts.get("runtime", 0) + counts.get("driver", 0)
    assert api == count(path, "CUPTI_ACTIVITY_KIND_RUNTIME", "eventClass != 67")
    assert counts.get("driver", 0) == count(path, "CUPTI_ACTIVITY_KIND_RUNTIME", "eventClass = 1")
    nvtx_ranges = count(path, "NVTX_EVENTS", "eventType IN (59, 60) AND end IS NOT NULL")
    assert counts.get("annotation", 0) == nvtx_ranges
    assert counts.get("os_call", 0) == count(path, "OSRT_API", "eventClass NOT IN (31, 32)")
    profiler = count(path, "PROFILER_OVERHEAD") + count(path, "CUPTI_ACTIVITY_KIND_OVERHEAD", "overheadType IN (3,4,5)")
    assert counts.get("overhead", 0) == profiler


@needs_shared
@pytest.mark.shared
def test_real_duplicate_backtrace_rows_dropped() -> None:
    assert count(SAXPY, "CUPTI_ACTIVITY_KIND_RUNTIME", "eventClass = 67") == 38
    counts = load(SAXPY).kind_counts()
    assert counts["runtime"] + counts["driver"] == 95 - 38


@needs_shared
@pytest.mark.shared
@real
def test_real_kernel_time_sums(path: Path) -> None:
    t = load(path)
    kernels = t.events.filter(pl.col("kind") == "kernel")
    assert kernels["dur_ns"].sum() == sql(path, 'SELECT SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')
    offset = sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    assert kernels["start_ns"].min() == offset + sql(path, "SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")


@needs_shared
@pytest.mark.shared
@real
def test_real_join_rate_matches_sql(path: Path) -> None:
    t = load(path)
    gpu = t.events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    linked = gpu.join(t.links, left_on="event_id", right_on="gpu_event_id", how="semi").height
    total_sql = 0
    linked_sql = 0
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if not has_table(path, table):
            continue
        total_sql += count(path, table)
        linked_sql += sql(
            path,
            f"""SELECT COUNT(*) FROM {table} g WHERE EXISTS (
                    SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                    WHERE r.eventClass != 67 AND r.correlationId = g.correlationId
                      AND ((r.globalTid >> 24) & 16777215) = ((g.globalPid >> 24) & 16777215))""",
        )
    assert gpu.height == total_sql
    assert linked == linked_sql
    assert linked / gpu.height == pytest.approx(linked_sql / total_sql)
    # a link never crosses processes
    ev = t.events.select("event_id", "pid")
    pairs = t.links.join(ev, left_on="launch_event_id", right_on="event_id").join(
        ev, left_on="gpu_event_id", right_on="event_id", suffix="_gpu"
    )
    assert (pairs["pid"] == pairs["pid_gpu"]).all()


@needs_shared
@pytest.mark.shared
@real
def test_real_each_gpu_row_has_at_most_one_launch(path: Path) -> None:
    """Correlation ids are unique per process, so (pid, correlationId) finds one call at most."""
    t = load(path)
    assert t.links.select("gpu_event_id").is_duplicated().sum() == 0
    kinds = t.events.select("event_id", "kind")
    launch_kinds = t.links.join(kinds, left_on="launch_event_id", right_on="event_id")["kind"].unique().to_list()
    assert set(launch_kinds) <= {"runtime", "driver"}


@needs_shared
@pytest.mark.shared
def test_real_nvtx_ranges_and_domains() -> None:
    saxpy = load(SAXPY)
    ranges = saxpy.events.filter(pl.col("kind") == "annotation")
    assert ranges.height == 22
    assert ranges.filter(pl.col("domain") == "MPI").height == count(
        SAXPY, "NVTX_EVENTS", "eventType = 59 AND domainId = 1"
    )
    assert set(ranges.filter(pl.col("domain") == "MPI")["name"]) == {"MPI_Init", "MPI_Send", "MPI_Recv", "MPI_Finalize"}
    assert ranges.filter(pl.col("name") == "saxpy")["domain"].null_count() == 5
    h100 = load(H100)
    assert h100.kind_counts()["annotation"] == 16782
    assert h100.events.filter(pl.col("kind") == "annotation")["tid"].null_count() == 0


@needs_shared
@pytest.mark.shared
@real
def test_real_memcpy_memory_kinds(path: Path) -> None:
    memcpy = load(path).events.filter(pl.col("kind") == "memcpy")
    pageable = memcpy.filter((pl.col("src_memory") == "pageable") | (pl.col("dst_memory") == "pageable")).height
    assert pageable == count(path, "CUPTI_ACTIVITY_KIND_MEMCPY", "srcKind = 0 OR dstKind = 0")
    assert memcpy.filter(pl.col("memcpy_kind") == "HtoD").height == count(
        path, "CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind = 1"
    )
    assert memcpy.filter(pl.col("memcpy_kind") == "DtoH").height == count(
        path, "CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind = 2"
    )


@needs_shared
@pytest.mark.shared
def test_real_pageable_counts() -> None:
    assert load(CLOVERLEAF).events.filter(pl.col("src_memory") == "pageable").height == 254
    assert load(SAXPY).events.filter(pl.col("src_memory") == "pageable").height == 10
    assert load(H100).events.filter(pl.col("src_memory") == "pageable").height == 4


@needs_shared
@pytest.mark.shared
def test_real_two_process_ranks() -> None:
    t = load(H100)
    assert t.info.ranks == (0, 1)
    assert t.info.metadata["rank_pids"] == {"0": 111, "1": 112}
    kernels = t.events.filter(pl.col("kind") == "kernel")
    assert kernels.group_by("rank").len().sort("rank").rows() == [(0, 1721), (1, 1721)]
    assert set(zip(kernels["pid"], kernels["rank"], strict=True)) == {(111, 0), (112, 1)}
    assert load(CLOVERLEAF).info.ranks == (0,)


@needs_shared
@pytest.mark.shared
def test_real_sync_rows() -> None:
    clover = load(CLOVERLEAF).events.filter(pl.col("kind") == "sync")
    assert clover.height == 1312
    assert clover["stream"].null_count() == count(CLOVERLEAF, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", f"streamId = {NA}")
    assert clover["tid"].null_count() == 0
    assert clover["sync_kind"].unique().to_list() == ["context_sync"]  # each is a cudaDeviceSynchronize
    h100 = load(H100).events.filter(pl.col("kind") == "sync")
    assert dict(h100.group_by("sync_kind").len().rows()) == {"stream_wait_event": 236, "stream_sync": 8}


@needs_shared
@pytest.mark.shared
def test_real_devices_and_threads() -> None:
    clover = load(CLOVERLEAF)
    assert clover.devices["device"].to_list() == [0, 1, 2, 3]
    assert set(clover.devices["name"]) == {"NVIDIA A100-SXM4-80GB"}
    assert clover.devices["sm_count"].to_list() == [108] * 4
    h100 = load(H100)
    assert h100.devices.rows() == [
        (0, None, "nvidia", None, None, None, None),
        (1, None, "nvidia", None, None, None, None),
    ]
    assert ("[NSys]",) in load(SAXPY).threads.select("thread_name").rows()


@needs_shared
@pytest.mark.shared
def test_real_export_is_not_modified(tmp_path: Path) -> None:
    copy = tmp_path / SAXPY.name
    shutil.copyfile(SAXPY, copy)
    before = copy.read_bytes()
    read_nsight(copy)
    assert copy.read_bytes() == before
