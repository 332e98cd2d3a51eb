"""The Nsight Systems writer: a scenario as an ``nsys export`` SQLite file (``<stem>.nsys.sqlite``,
export schema 3.13.2 as nsys 2024.5 writes it).
"""

from __future__ import annotations

import datetime
import os
import sqlite3
from pathlib import Path
from typing import Any

from .model import (
    CONTEXT,
    GPU_NAME,
    GPU_NUM_SMS,
    GPU_TOTAL_MEM,
    RUNTIME_API,
    SENTINEL_U32,
    SESSION_EPOCH_NS,
    SYNC_TYPE,
    Scenario,
)

NSYS_PRODUCT_VERSION = "2024.5.1.113"
NSYS_SCHEMA_VERSION = "3.13.2"
NVTX_DOMAIN_ID = 1
NVTX_DOMAIN_NAME = "tracekit.train"

# Column lists and types in the order nsys 2024.5 creates them. (name, declared type, constraint)
_I, _T, _R = "INTEGER", "TEXT", "REAL"
_NN, _PK = "NOT NULL", "NOT NULL   PRIMARY KEY"
_GPU_PREFIX = [("start", _I, _NN), ("end", _I, _NN), ("deviceId", _I, _NN), ("contextId", _I, _NN),
               ("greenContextId", _I, ""), ("streamId", _I, _NN), ("correlationId", _I, ""),
               ("globalPid", _I, "")]
_ENUM = [("id", _I, _PK), ("name", _T, ""), ("label", _T, "")]
_SCHEMA: dict[str, list[tuple[str, str, str]]] = {
    "StringIds": [("id", _I, _PK), ("value", _T, _NN)],
    "ThreadNames": [("nameId", _I, _NN), ("priority", _I, ""), ("globalTid", _I, "")],
    "PROCESSES": [("globalPid", _I, ""), ("pid", _I, ""), ("name", _T, "")],
    "META_DATA_EXPORT": [("name", _T, _NN), ("value", _T, "")],
    "ANALYSIS_DETAILS": [("globalVid", _I, _NN), ("duration", _I, _NN), ("startTime", _I, _NN),
                         ("stopTime", _I, _NN)],
    "TARGET_INFO_SESSION_START_TIME": [("utcEpochNs", _I, ""), ("utcTime", _T, ""), ("localTime", _T, "")],
    "TARGET_INFO_GPU": [
        ("vmId", _I, _NN), ("id", _I, _NN), ("name", _T, ""), ("busLocation", _T, ""), ("isDiscrete", _I, ""),
        ("l2CacheSize", _I, ""), ("totalMemory", _I, ""), ("memoryBandwidth", _I, ""), ("clockRate", _I, ""),
        ("smCount", _I, ""), ("pwGpuId", _I, ""), ("uuid", _T, ""), ("luid", _I, ""), ("chipName", _T, ""),
        ("cuDevice", _I, ""), ("ctxswDevPath", _T, ""), ("ctrlDevPath", _T, ""), ("revision", _I, ""),
        ("nodeMask", _I, ""), ("constantMemory", _I, ""), ("maxIPC", _I, ""), ("maxRegistersPerBlock", _I, ""),
        ("maxShmemPerBlock", _I, ""), ("maxShmemPerBlockOptin", _I, ""), ("maxShmemPerSm", _I, ""),
        ("maxRegistersPerSm", _I, ""), ("threadsPerWarp", _I, ""), ("asyncEngines", _I, ""),
        ("maxWarpsPerSm", _I, ""), ("maxBlocksPerSm", _I, ""), ("maxThreadsPerBlock", _I, ""),
        ("maxBlockDimX", _I, ""), ("maxBlockDimY", _I, ""), ("maxBlockDimZ", _I, ""), ("maxGridDimX", _I, ""),
        ("maxGridDimY", _I, ""), ("maxGridDimZ", _I, ""), ("computeMajor", _I, ""), ("computeMinor", _I, ""),
        ("smMajor", _I, ""), ("smMinor", _I, ""),
    ],
    "TARGET_INFO_CUDA_CONTEXT_INFO": [
        ("nullStreamId", _I, _NN), ("hwId", _I, _NN), ("vmId", _I, _NN), ("processId", _I, _NN),
        ("deviceId", _I, _NN), ("contextId", _I, _NN), ("parentContextId", _I, ""), ("isGreenContext", _I, ""),
    ],
    "TARGET_INFO_CUDA_STREAM": [
        ("streamId", _I, _NN), ("hwId", _I, _NN), ("vmId", _I, _NN), ("processId", _I, _NN),
        ("contextId", _I, _NN), ("priority", _I, _NN), ("flag", _I, _NN),
    ],
    "ENUM_CUDA_MEMCPY_OPER": _ENUM,
    "ENUM_CUDA_MEM_KIND": _ENUM,
    "ENUM_CUPTI_SYNC_TYPE": _ENUM,
    "ENUM_CUDA_KERNEL_LAUNCH_TYPE": _ENUM,
    "ENUM_CUDA_FUNC_CACHE_CONFIG": _ENUM,
    "ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG": _ENUM,
    "ENUM_CUPTI_STREAM_TYPE": _ENUM,
    "ENUM_NSYS_EVENT_TYPE": _ENUM,
    "ENUM_NSYS_EVENT_CLASS": _ENUM,
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        *_GPU_PREFIX,
        ("demangledName", _I, _NN), ("shortName", _I, _NN), ("mangledName", _I, ""), ("launchType", _I, ""),
        ("cacheConfig", _I, ""), ("registersPerThread", _I, _NN), ("gridX", _I, _NN), ("gridY", _I, _NN),
        ("gridZ", _I, _NN), ("blockX", _I, _NN), ("blockY", _I, _NN), ("blockZ", _I, _NN),
        ("staticSharedMemory", _I, _NN), ("dynamicSharedMemory", _I, _NN), ("localMemoryPerThread", _I, _NN),
        ("localMemoryTotal", _I, _NN), ("gridId", _I, _NN), ("sharedMemoryExecuted", _I, ""),
        ("graphNodeId", _I, ""), ("sharedMemoryLimitConfig", _I, ""),
    ],
    "CUPTI_ACTIVITY_KIND_MEMCPY": [
        *_GPU_PREFIX,
        ("bytes", _I, _NN), ("copyKind", _I, _NN), ("deprecatedSrcId", _I, ""), ("srcKind", _I, ""),
        ("dstKind", _I, ""), ("srcDeviceId", _I, ""), ("srcContextId", _I, ""), ("dstDeviceId", _I, ""),
        ("dstContextId", _I, ""), ("migrationCause", _I, ""), ("graphNodeId", _I, ""), ("virtualAddress", _I, ""),
    ],
    "CUPTI_ACTIVITY_KIND_MEMSET": [
        *_GPU_PREFIX,
        ("value", _I, _NN), ("bytes", _I, _NN), ("graphNodeId", _I, ""), ("memKind", _I, ""),
    ],
    "CUPTI_ACTIVITY_KIND_RUNTIME": [
        ("start", _I, _NN), ("end", _I, _NN), ("eventClass", _I, _NN), ("globalTid", _I, ""),
        ("correlationId", _I, ""), ("nameId", _I, _NN), ("returnValue", _I, _NN), ("callchainId", _I, ""),
    ],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [*_GPU_PREFIX, ("syncType", _I, _NN), ("eventId", _I, _NN)],
    "NVTX_EVENTS": [
        ("start", _I, _NN), ("end", _I, ""), ("eventType", _I, _NN), ("rangeId", _I, ""), ("category", _I, ""),
        ("color", _I, ""), ("text", _T, ""), ("globalTid", _I, ""), ("endGlobalTid", _I, ""), ("textId", _I, ""),
        ("domainId", _I, ""), ("uint64Value", _I, ""), ("int64Value", _I, ""), ("doubleValue", _R, ""),
        ("uint32Value", _I, ""), ("int32Value", _I, ""), ("floatValue", _R, ""), ("jsonTextId", _I, ""),
        ("jsonText", _T, ""),
    ],
}

#: Tables nsys writes even when empty-ish (lookup, target and metadata tables). Event tables are
#: created lazily, only when they have rows, as ``nsys export --lazy=true`` (the default) does.
_ALWAYS = (
    "StringIds", "ThreadNames", "PROCESSES", "META_DATA_EXPORT", "ANALYSIS_DETAILS",
    "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_CONTEXT_INFO",
    "TARGET_INFO_CUDA_STREAM", *(t for t in _SCHEMA if t.startswith("ENUM_")),
)

_ENUM_ROWS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
        (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"), (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
        (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"), (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"), (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"), (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
        (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
        (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"), (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
    "ENUM_CUDA_KERNEL_LAUNCH_TYPE": [
        (0, "CUDA_KERNEL_LAUNCH_TYPE_UNKNOWN", "Unknown"), (1, "CUDA_KERNEL_LAUNCH_TYPE_REGULAR", "Regular"),
        (2, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE", "Coop Single Device"),
        (3, "CUDA_KERNEL_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE", "Coop Multi Device"),
    ],
    "ENUM_CUDA_FUNC_CACHE_CONFIG": [
        (0, "CU_FUNC_CACHE_PREFER_NONE", "None"), (1, "CU_FUNC_CACHE_PREFER_SHARED", "Shared"),
        (2, "CU_FUNC_CACHE_PREFER_L1", "L1"), (3, "CU_FUNC_CACHE_PREFER_EQUAL", "Equal"),
    ],
    "ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG": [
        (0, "CUDA_SHARED_MEM_LIMIT_DEFAULT", "Default"), (1, "CUDA_SHARED_MEM_LIMIT_OPTIN", "Opt in"),
    ],
    "ENUM_CUPTI_STREAM_TYPE": [
        (0, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_UNKNOWN", "Unknown stream type"),
        (1, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_DEFAULT", "Default stream"),
        (2, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NON_BLOCKING", "Non-blocking stream"),
        (3, "CUPTI_ACTIVITY_STREAM_CREATE_FLAG_NULL", "Null stream"),
    ],
    # Only the NVTX part of the (much longer) real enum.
    "ENUM_NSYS_EVENT_TYPE": [
        (33, "NvtxCategory", "NvtxCategory"), (34, "NvtxMark", "NvtxMark"), (35, "NvtxPushRange", "NvtxPushRange"),
        (36, "NvtxPopRange", "NvtxPopRange"), (37, "NvtxStartRange", "NvtxStartRange"),
        (38, "NvtxEndRange", "NvtxEndRange"), (39, "NvtxThread", "NvtxThread"),
        (59, "NvtxPushPopRange", "NvtxPushPopRange"), (60, "NvtxStartEndRange", "NvtxStartEndRange"),
        (75, "NvtxDomainCreate", "NvtxDomainCreate"), (76, "NvtxDomainDestroy", "NvtxDomainDestroy"),
    ],
    # Only the classes a CUDA + NVTX capture can produce in the RUNTIME table and neighbours.
    "ENUM_NSYS_EVENT_CLASS": [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"), (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
        (27, "TRACE_PROCESS_EVENT_OS_RUNTIME", "OSRT runtime"), (28, "TRACE_PROCESS_EVENT_CUDNN", "cuDNN"),
        (29, "TRACE_PROCESS_EVENT_CUBLAS", "cuBLAS"), (67, "TRACE_PROCESS_EVENT_CUDABACKTRACE", "CUDA backtrace"),
        (77, "TRACE_PROCESS_EVENT_CUDA_GRAPH_NODE_CREATION", "CUDA graph node creation"),
    ],
}


def global_tid(pid: int, tid: int) -> int:
    """nsys serialized thread id: hw:8 | vm:8 | pid:24 | tid:24, here with hw = vm = 0."""
    return (pid << 24) | tid


def global_pid(pid: int) -> int:
    return pid << 24


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, value: str) -> int:
        if value not in self.ids:
            self.ids[value] = len(self.ids)
        return self.ids[value]


def _utc(ns: int) -> str:
    dt = datetime.datetime.fromtimestamp(ns // 1_000_000_000, tz=datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S")


def _gpu_row(sc: Scenario, dev: int) -> tuple[Any, ...]:
    uuid = f"8f1c2d3e-4a5b-6c7d-8e9f-{dev:012x}"
    return (0, dev, GPU_NAME, f"0000:{0x18 + 0x20 * dev:02x}:00.0", 1, 52_428_800, GPU_TOTAL_MEM,
            3_352_320_000_000, 1_980_000_000, GPU_NUM_SMS, dev, uuid, 0, "GH100", dev, "", "", 161, 0, 65_536, 4,
            65_536, 49_152, 232_448, 233_472, 65_536, 32, 3, 64, 32, 1024, 1024, 1024, 64, 2_147_483_647, 65_535,
            65_535, 9, 0, 9, 0)


def nsys_rows(sc: Scenario) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """Every table of the Nsight export as (column names, rows), in creation order.

    Event tables with no rows are left out (lazy export)."""
    s = _Strings()
    for fixed in ("[Unknown]", "[NSys]", "[NSys Comms]", "CUPTI worker thread", "pt_main_thread"):
        s(fixed)
    gpid = global_pid(sc.pid)
    main = global_tid(sc.pid, sc.tid)
    tables: dict[str, list[tuple[Any, ...]]] = {t: [] for t in _SCHEMA}

    tables["ThreadNames"] = [
        (s("pt_main_thread"), 20, main),
        (s("[NSys]"), 10, global_tid(sc.pid, sc.tid + 3)),
        (s("[NSys Comms]"), 10, global_tid(sc.pid, sc.tid + 4)),
        (s("CUPTI worker thread"), 10, global_tid(sc.pid, sc.tid + 9)),
    ]
    tables["PROCESSES"] = [(gpid, sc.pid, "python3")]
    tables["TARGET_INFO_GPU"] = [_gpu_row(sc, d) for d in range(sc.n_devices)]
    tables["TARGET_INFO_CUDA_CONTEXT_INFO"] = [(sc.stream, 0, 0, sc.pid, sc.device, CONTEXT, None, None)]
    tables["TARGET_INFO_CUDA_STREAM"] = [(sc.stream, 0, 0, sc.pid, CONTEXT, 0, 3)]
    tables["TARGET_INFO_SESSION_START_TIME"] = [(SESSION_EPOCH_NS, _utc(SESSION_EPOCH_NS), _utc(SESSION_EPOCH_NS))]
    tables["ANALYSIS_DETAILS"] = [(0, sc.profiler_end, 0, sc.profiler_end)]
    for table, rows in _ENUM_ROWS.items():
        tables[table] = list(rows)

    # Runtime calls in start order, then GPU activity; names go into StringIds as first met.
    for r in sorted(sc.runtime, key=lambda r: (r.start, r.correlation)):
        tables["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            (r.start, r.end, 0, global_tid(sc.pid, r.tid), r.correlation, s(RUNTIME_API[r.name][1]), 0, None))
    grid_id = 0
    for o in sorted(sc.gpu_ops, key=lambda o: (o.start, o.correlation)):
        prefix = (o.start, o.end, o.device, CONTEXT, None, o.stream, o.correlation, gpid)
        if o.kind == "kernel":
            k = o.kernel
            assert k is not None
            grid_id += 1
            # Above 48 KiB a kernel needs opt-in dynamic shared memory; the driver reserves whole 8 KiB units.
            optin = k.shared_mem > 48 * 1024
            static = 0 if optin else k.shared_mem
            executed = max(8192, -(-k.shared_mem // 8192) * 8192)
            tables["CUPTI_ACTIVITY_KIND_KERNEL"].append((
                *prefix, s(k.name), s(k.short), None, 1, 0, k.registers, *k.grid, *k.block, static, k.shared_mem - static,
                0, 0, grid_id, executed, None, 1 if optin else 0))
        elif o.kind == "memcpy":
            tables["CUPTI_ACTIVITY_KIND_MEMCPY"].append((
                *prefix, o.nbytes, o.copy_kind, None, o.src_kind, o.dst_kind, None, None, None, None, None, None, None))
        else:
            tables["CUPTI_ACTIVITY_KIND_MEMSET"].append((*prefix, 0, o.nbytes, None, o.dst_kind))
    for y in sorted(sc.syncs, key=lambda y: (y.start, y.correlation)):
        stream = y.stream if y.stream is not None else SENTINEL_U32
        event = y.event_id if y.event_id is not None else SENTINEL_U32
        tables["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append(
            (y.start, y.end, y.device, CONTEXT, None, stream, y.correlation, gpid, SYNC_TYPE[y.kind], event))

    # NVTX: a domain-create row, then push/pop ranges whose messages are registered strings.
    nvtx = tables["NVTX_EVENTS"]
    nvtx.append((sc.profiler_start, None, 75, None, None, None, NVTX_DOMAIN_NAME, main, None, None,
                 NVTX_DOMAIN_ID, None, None, None, None, None, None, None, None))
    for rng in sc.nvtx:
        nvtx.append((rng.start, rng.end, 59, None, None, None, None, global_tid(sc.pid, rng.tid), None, s(rng.text),
                     NVTX_DOMAIN_ID, None, None, None, None, None, None, None, None))

    stem = f"{sc.stem}.nsys"
    tables["META_DATA_EXPORT"] = [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", NSYS_PRODUCT_VERSION),
        ("EXPORT_PRODUCT_DATE", "2024.5"), ("EXPORT_SCHEMA_VERSION", NSYS_SCHEMA_VERSION),
        ("EXPORT_SCHEMA_VERSION_MAJOR", "3"), ("EXPORT_SCHEMA_VERSION_MINOR", "13"),
        ("EXPORT_SCHEMA_VERSION_MICRO", "2"), ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"),
        ("EXPORT_TIME_UTC", _utc(SESSION_EPOCH_NS)), ("EXPORT_HOST", "tracekit-synthetic"),
        ("EXPORT_USER", "tracekit"), ("EXPORT_PARAM_INPUT_FILE", f"{stem}-rep"),
        ("EXPORT_PARAM_OUTPUT_FILE", f"{stem}.sqlite"), ("EXPORT_PARAM_LAZY", "true"),
        ("EXPORT_PARAM_TIME_NORMALIZE", "false"), ("EXPORT_PARAM_TIME_SHIFT", "0"),
        ("DERIVED_BY", "tracekit scripts/synthetic.py (synthetic, not a capture)"),
    ]
    tables["StringIds"] = [(i, v) for v, i in s.ids.items()]

    out: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = {}
    for table, cols in _SCHEMA.items():
        rows = tables[table]
        if rows or table in _ALWAYS:
            out[table] = ([c[0] for c in cols], rows)
    return out


def _ddl(table: str) -> str:
    cols = _SCHEMA[table]
    body = ",\n".join(f"    {name:<28}{typ:<10}{cons}".rstrip() for name, typ, cons in cols)
    return f"CREATE TABLE {table} (\n{body}\n)"


def write_nsys(sc: Scenario, path: str | os.PathLike[str]) -> Path:
    """Write the SQLite export; deterministic (fixed page size, ordered inserts, VACUUM)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    for f in (tmp, Path(str(tmp) + "-journal")):
        f.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.execute("PRAGMA page_size = 4096")
        con.execute("PRAGMA journal_mode = DELETE")
        with con:
            for table, (cols, rows) in nsys_rows(sc).items():
                con.execute(_ddl(table))
                if rows:
                    marks = ", ".join("?" * len(cols))
                    con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        con.execute("VACUUM")
    finally:
        con.close()
    os.replace(tmp, p)
    return p
