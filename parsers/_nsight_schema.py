"""The parts of the Nsight Systems export schema the reader uses: the columns it reads from
each table, and what the tables' codes mean.

Newer exports carry ENUM_* tables naming their codes; older ones (nsys 2022.x and before) do
not, and the built-in decodings here stand in for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from tracekit.schema import GPU_ACTIVITY_KINDS, EventKind, MemcpyKind, MemoryKind, SyncKind

I64 = pl.Int64()
I32 = pl.Int32()
STR = pl.String()


#: CUPTI's "not applicable" value for 32-bit stream and event ids
NA_U32 = 4294967295


# NVTX_EVENTS.eventType codes
NVTX_MARK = 34
NVTX_THREAD_NAME = 39
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
NVTX_TYPES = (NVTX_MARK, NVTX_THREAD_NAME, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE)

# CUPTI_ACTIVITY_KIND_RUNTIME.eventClass codes (ENUM_NSYS_EVENT_CLASS)
CLASS_RUNTIME = 0
CLASS_DRIVER = 1
CLASS_BACKTRACE = 67
# OSRT_API.eventClass codes for the "OS runtime profiling started/finished" markers
OSRT_MARKERS = (31, 32)

# Built-in decodings, used when an export has no ENUM_* tables (2022.x and older).
# ENUM_CUDA_MEMCPY_OPER: array copies count as device memory for the direction.
MEMCPY_CODES = {
    0: MemcpyKind.UNKNOWN, 1: MemcpyKind.HTOD, 2: MemcpyKind.DTOH, 3: MemcpyKind.HTOD,
    4: MemcpyKind.DTOH, 5: MemcpyKind.DTOD, 6: MemcpyKind.DTOD, 7: MemcpyKind.DTOD,
    8: MemcpyKind.DTOD, 9: MemcpyKind.HTOH, 10: MemcpyKind.PTOP, 11: MemcpyKind.HTOD,
    12: MemcpyKind.DTOH, 13: MemcpyKind.DTOD,
}  # fmt: skip
MEMCPY_TOKENS = {
    "UNKNOWN": MemcpyKind.UNKNOWN, "HTOD": MemcpyKind.HTOD, "DTOH": MemcpyKind.DTOH,
    "HTOA": MemcpyKind.HTOD, "ATOH": MemcpyKind.DTOH, "ATOA": MemcpyKind.DTOD,
    "ATOD": MemcpyKind.DTOD, "DTOA": MemcpyKind.DTOD, "DTOD": MemcpyKind.DTOD,
    "HTOH": MemcpyKind.HTOH, "PTOP": MemcpyKind.PTOP,
}  # fmt: skip
# ENUM_CUDA_MEM_KIND
MEMORY_CODES = {
    0: MemoryKind.PAGEABLE, 1: MemoryKind.PINNED, 2: MemoryKind.DEVICE, 3: MemoryKind.ARRAY,
    4: MemoryKind.MANAGED, 5: MemoryKind.DEVICE, 6: MemoryKind.MANAGED, 7: MemoryKind.UNKNOWN,
}  # fmt: skip
MEMORY_TOKENS = {
    "PAGEABLE": MemoryKind.PAGEABLE, "PINNED": MemoryKind.PINNED, "DEVICE": MemoryKind.DEVICE,
    "ARRAY": MemoryKind.ARRAY, "MANAGED": MemoryKind.MANAGED, "DEVICE_STATIC": MemoryKind.DEVICE,
    "MANAGED_STATIC": MemoryKind.MANAGED, "UNKNOWN": MemoryKind.UNKNOWN,
}  # fmt: skip
# ENUM_CUPTI_SYNC_TYPE
SYNC_CODES = {
    1: SyncKind.EVENT_SYNC, 2: SyncKind.STREAM_WAIT_EVENT, 3: SyncKind.STREAM_SYNC, 4: SyncKind.CONTEXT_SYNC,
}  # fmt: skip
SYNC_TOKENS = {
    "EVENT_SYNCHRONIZE": SyncKind.EVENT_SYNC, "STREAM_WAIT_EVENT": SyncKind.STREAM_WAIT_EVENT,
    "STREAM_SYNCHRONIZE": SyncKind.STREAM_SYNC, "CONTEXT_SYNCHRONIZE": SyncKind.CONTEXT_SYNC,
    "UNKNOWN": SyncKind.UNKNOWN,
}  # fmt: skip


# ENUM_CUPTI_OVERHEAD_TYPE: which overhead types the profiler itself causes
PROFILER_OVERHEAD_CODES = {3: True, 4: True, 5: True}
OVERHEAD_TOKENS = {"CUPTI_BUFFER_FLUSH": True, "CUPTI_INSTRUMENTATION": True, "CUPTI_RESOURCE": True}


GPU_LINK_KINDS = [*GPU_ACTIVITY_KINDS, EventKind.SYNC.value]


def decode_enum(
    names: Mapping[int, str], marker: str, tokens: Mapping[str, object], fallback: Mapping[int, object], unknown: object
) -> dict[int, object]:
    """Code → canonical value: the export's ENUM names when present, else the built-in codes.

    ``marker`` ends the common prefix of the ENUM names (``CUDA_MEMCPY_KIND_HTOD`` with
    marker ``KIND_`` gives the token ``HTOD``).
    """
    out: dict[int, object] = dict(fallback)
    for code, name in names.items():
        token = name.rsplit(marker, 1)[-1] if marker in name else name
        token = token.removeprefix("UVM_")
        out[code] = tokens.get(token, unknown)
    return out


def map_codes(expr: pl.Expr, mapping: Mapping[int, object], unknown: str) -> pl.Expr:
    """Vectorised code → text lookup; null stays null, unlisted codes read ``unknown``."""
    values = {k: (v.value if isinstance(v, (MemcpyKind, MemoryKind, SyncKind)) else str(v)) for k, v in mapping.items()}
    return pl.when(expr.is_null()).then(None).otherwise(expr.replace_strict(values, default=unknown, return_dtype=STR))


def pid_of(col: str) -> pl.Expr:
    """PID from a serialized globalTid/globalPid (hw:8 | vm:8 | pid:24 | tid:24)."""
    return (pl.col(col) & 0xFFFFFF000000) // 0x1000000


def tid_of(col: str) -> pl.Expr:
    return pl.col(col) & 0xFFFFFF


# ----------------------------------------------------------------------------------------
# the reader


def table_spec(**columns: tuple[str, pl.DataType]) -> dict[str, tuple[str, pl.DataType]]:
    return dict(columns)


_GPU_PREFIX = table_spec(
    start=("start", I64),
    end=("end", I64),
    device=("deviceId", I64),
    stream=("streamId", I64),
    correlation=("correlationId", I64),
    gpid=("globalPid", I64),
)
STRINGS_SPEC = table_spec(id=("id", I64), value=("value", STR))
API_SPEC = table_spec(
    start=("start", I64),
    end=("end", I64),
    event_class=("eventClass", I64),
    gtid=("globalTid", I64),
    correlation=("correlationId", I64),
    name_id=("nameId", I64),
)
API_WHERE = (("eventClass", f'"eventClass" IS NOT {CLASS_BACKTRACE}'),)
API_TABLES = (("CUPTI_ACTIVITY_KIND_RUNTIME", None), ("CUPTI_ACTIVITY_KIND_DRIVER", EventKind.DRIVER))
KERNEL_SPEC = _GPU_PREFIX | table_spec(
    demangled=("demangledName", I64),
    short=("shortName", I64),
    grid_x=("gridX", I64),
    grid_y=("gridY", I64),
    grid_z=("gridZ", I64),
    block_x=("blockX", I64),
    block_y=("blockY", I64),
    block_z=("blockZ", I64),
    registers_per_thread=("registersPerThread", I64),
    static_smem=("staticSharedMemory", I64),
    dynamic_smem=("dynamicSharedMemory", I64),
)
MEMCPY_SPEC = _GPU_PREFIX | table_spec(
    bytes=("bytes", I64), copy_kind=("copyKind", I64), src_kind=("srcKind", I64), dst_kind=("dstKind", I64)
)
MEMSET_SPEC = _GPU_PREFIX | table_spec(bytes=("bytes", I64), mem_kind=("memKind", I64))
SYNC_SPEC = _GPU_PREFIX | table_spec(
    sync_type=("syncType", I64),
    old_sync_type=("deprecatedSyncType", I64),
    event_sync_id=("eventSyncId", I64),
    gtid=("globalTid", I64),
)
NVTX_SPEC = table_spec(
    start=("start", I64),
    end=("end", I64),
    event_type=("eventType", I64),
    text=("text", STR),
    text_id=("textId", I64),
    gtid=("globalTid", I64),
    domain_id=("domainId", I64),
)
NVTX_WHERE = (("eventType", f'"eventType" IN ({", ".join(str(t) for t in NVTX_TYPES)})'),)
OSRT_SPEC = table_spec(
    start=("start", I64),
    end=("end", I64),
    event_class=("eventClass", I64),
    gtid=("globalTid", I64),
    name_id=("nameId", I64),
)
PROFILER_OVERHEAD_SPEC = table_spec(
    start=("start", I64), end=("end", I64), gtid=("globalTid", I64), name_id=("nameId", I64)
)
CUPTI_OVERHEAD_SPEC = table_spec(
    start=("start", I64),
    end=("end", I64),
    gtid=("globalTid", I64),
    correlation=("correlationId", I64),
    name_id=("nameId", I64),
    overhead_type=("overheadType", I64),
)
#: the bulk reads, started together in background threads (see Db.prefetch), in the order
#: the reader decodes them, so that the first table it needs is the first one read
BULK_READS: tuple[tuple[str, Mapping[str, tuple[str, pl.DataType]], Sequence[tuple[str, str]]], ...] = (
    ("StringIds", STRINGS_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", API_SPEC, API_WHERE),
    ("CUPTI_ACTIVITY_KIND_DRIVER", API_SPEC, API_WHERE),
    ("NVTX_EVENTS", NVTX_SPEC, NVTX_WHERE),
    ("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_MEMSET", MEMSET_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", SYNC_SPEC, ()),
    ("OSRT_API", OSRT_SPEC, ()),
    ("PROFILER_OVERHEAD", PROFILER_OVERHEAD_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_OVERHEAD", CUPTI_OVERHEAD_SPEC, ()),
)
