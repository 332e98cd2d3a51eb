"""The Nsight export's CPU and GPU activity tables as canonical event rows.

* ``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``_DRIVER`` when an export has it): API calls;
* ``_KERNEL``, ``_MEMCPY``, ``_MEMSET``: GPU rows placed by (device, stream);
* ``_SYNCHRONIZATION``: sync rows on the waiting host thread;
* ``OSRT_API``, ``PROFILER_OVERHEAD``, ``CUPTI_ACTIVITY_KIND_OVERHEAD``: OS calls and overhead.

Each function reads one kind of table through an :class:`~._nsight_export.Export` and gives
its rows in the events table's columns, with session-relative times.
"""

from __future__ import annotations

import polars as pl

from tracekit.schema import EVENT_KIND, MEMCPY_KIND, MEMORY_KIND, SYNC_KIND, EventKind, MemcpyKind, MemoryKind, SyncKind

from ._nsight_export import Export
from ._nsight_schema import (
    API_SPEC,
    API_TABLES,
    API_WHERE,
    CLASS_DRIVER,
    CLASS_RUNTIME,
    CUPTI_OVERHEAD_SPEC,
    I32,
    I64,
    KERNEL_SPEC,
    MEMCPY_CODES,
    MEMCPY_SPEC,
    MEMCPY_TOKENS,
    MEMORY_CODES,
    MEMORY_TOKENS,
    MEMSET_SPEC,
    NA_U32,
    OSRT_MARKERS,
    OSRT_SPEC,
    OVERHEAD_TOKENS,
    PROFILER_OVERHEAD_CODES,
    PROFILER_OVERHEAD_SPEC,
    STR,
    SYNC_CODES,
    SYNC_SPEC,
    SYNC_TOKENS,
    decode_enum,
    map_codes,
    pid_of,
    table_spec,
    tid_of,
)

#: synchronising API calls (version suffix stripped) and what they wait for
_SYNC_APIS = (
    (r"^cu(?:da)?(?:Device|Ctx|Thread)Synchronize", SyncKind.CONTEXT_SYNC),
    (r"^cu(?:da)?StreamSynchronize", SyncKind.STREAM_SYNC),
    (r"^cu(?:da)?EventSynchronize", SyncKind.EVENT_SYNC),
    (r"^cu(?:da)?StreamWaitEvent", SyncKind.STREAM_WAIT_EVENT),
)
#: sync rows are named like Kineto's cuda_sync events
_SYNC_NAMES = {
    SyncKind.EVENT_SYNC.value: "Event Sync",
    SyncKind.STREAM_WAIT_EVENT.value: "Stream Wait Event",
    SyncKind.STREAM_SYNC.value: "Stream Sync",
    SyncKind.CONTEXT_SYNC.value: "Context Sync",
    SyncKind.UNKNOWN.value: "Sync",
}


#: NCCL kernel name → collective (ncclKernel_AllReduce_..., ncclDevKernel_SendRecv, ...)
_NCCL_COLLECTIVE = (
    r"^nccl(?:Dev)?Kernel_(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll|Send|Recv)"
)
_COLLECTIVE_NAMES = {
    "AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send_recv", "AllToAll": "all_to_all",
    "Send": "send", "Recv": "recv",
}  # fmt: skip


def runtime_rows(export: Export) -> pl.DataFrame:
    """The runtime and driver API calls (eventClass 0 → ``runtime``, 1 → ``driver``; the
    duplicate backtrace rows of older exports left out), their ``_v<N>`` suffixes stripped."""
    parts = []
    # the version suffix is stripped once per distinct string, not once per call
    names = export.strings.with_columns(pl.col("value").str.replace(r"_v\d+$", ""))
    for table, default in API_TABLES:
        frame = export.fetch(table, API_SPEC, API_WHERE)
        if not frame.height:
            continue
        if default is None:
            kind = (
                pl.when(pl.col("event_class") == CLASS_DRIVER)
                .then(pl.lit(EventKind.DRIVER.value))
                .when((pl.col("event_class") == CLASS_RUNTIME) | pl.col("event_class").is_null())
                .then(pl.lit(EventKind.RUNTIME.value))
                .otherwise(pl.lit(EventKind.OTHER.value))
            )
        else:
            kind = pl.lit(default.value)
        named = frame.join(names.rename({"id": "name_id", "value": "name"}), on="name_id", how="left", maintain_order="left")
        parts.append(named.with_columns(kind.alias("kind")))
    if not parts:
        return pl.DataFrame()
    frame = pl.concat(parts, how="vertical_relaxed")
    frame = export.intervals(frame, "CUDA API")
    return frame.select(
        pl.col("kind").cast(EVENT_KIND),
        "name",
        pid_of("gtid").alias("pid"),
        tid_of("gtid").alias("tid"),
        "start_ns",
        "dur_ns",
        "correlation",
    )


def _gpu_common() -> list[pl.Expr | str]:
    """The columns every GPU row has: the launching process, no thread, its device and stream."""
    return [
        pid_of("gpid").alias("pid"),
        pl.lit(None, dtype=I64).alias("tid"),
        pl.col("device").cast(I32, strict=False),
        "stream",
        "start_ns",
        "dur_ns",
        "correlation",
    ]


def kernel_rows(export: Export) -> pl.DataFrame:
    """The kernels, with their launch shape and the collective an NCCL kernel's name names."""
    frame = export.fetch("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_SPEC)
    if not frame.height:
        return pl.DataFrame()
    frame = export.name(export.name(frame, "demangled", "demangled_name"), "short", "short_name")
    frame = export.intervals(frame, "kernel")
    name = pl.coalesce("demangled_name", "short_name")
    collective = name.str.extract(_NCCL_COLLECTIVE, 1).replace_strict(
        _COLLECTIVE_NAMES, default=None, return_dtype=STR
    )
    return frame.select(
        pl.lit(EventKind.KERNEL.value, dtype=EVENT_KIND).alias("kind"),
        name.alias("name"),
        *_gpu_common(),
        (pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z")).alias("grid_blocks"),
        (pl.col("block_x") * pl.col("block_y") * pl.col("block_z")).alias("block_threads"),
        pl.col("registers_per_thread").cast(I32, strict=False),
        pl.when(pl.col("static_smem").is_null() & pl.col("dynamic_smem").is_null())
        .then(None)
        .otherwise(pl.col("static_smem").fill_null(0) + pl.col("dynamic_smem").fill_null(0))
        .alias("shared_memory_bytes"),
        collective.alias("collective"),
    )


def memcpy_rows(export: Export) -> pl.DataFrame:
    """The memory copies, named and typed by their copy kind and memory kinds."""
    frame = export.fetch("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_SPEC)
    if not frame.height:
        return pl.DataFrame()
    frame = export.intervals(frame, "memcpy")
    copy_codes = decode_enum(
        export.db.enum("ENUM_CUDA_MEMCPY_OPER"), "KIND_", MEMCPY_TOKENS, MEMCPY_CODES, MemcpyKind.UNKNOWN
    )
    memory = _memory_codes(export)
    kind = map_codes(pl.col("copy_kind"), copy_codes, MemcpyKind.UNKNOWN.value)
    return frame.select(
        pl.lit(EventKind.MEMCPY.value, dtype=EVENT_KIND).alias("kind"),
        pl.concat_str(pl.lit("[CUDA memcpy "), kind.fill_null(MemcpyKind.UNKNOWN.value), pl.lit("]")).alias("name"),
        *_gpu_common(),
        "bytes",
        # typed here, on this table's rows, rather than on the whole events table
        kind.cast(MEMCPY_KIND).alias("memcpy_kind"),
        map_codes(pl.col("src_kind"), memory, MemoryKind.UNKNOWN.value).cast(MEMORY_KIND).alias("src_memory"),
        map_codes(pl.col("dst_kind"), memory, MemoryKind.UNKNOWN.value).cast(MEMORY_KIND).alias("dst_memory"),
    )


def _memory_codes(export: Export) -> dict[int, object]:
    """Memory kind code → memory kind, from the export's ENUM table or the built-in one."""
    return decode_enum(
        export.db.enum("ENUM_CUDA_MEM_KIND"), "MEMORY_KIND_", MEMORY_TOKENS, MEMORY_CODES, MemoryKind.UNKNOWN
    )


def memset_rows(export: Export) -> pl.DataFrame:
    """The memsets, with the memory kind they set."""
    frame = export.fetch("CUPTI_ACTIVITY_KIND_MEMSET", MEMSET_SPEC)
    if not frame.height:
        return pl.DataFrame()
    frame = export.intervals(frame, "memset")
    return frame.select(
        pl.lit(EventKind.MEMSET.value, dtype=EVENT_KIND).alias("kind"),
        pl.lit("[CUDA memset]").alias("name"),
        *_gpu_common(),
        "bytes",
        map_codes(pl.col("mem_kind"), _memory_codes(export), MemoryKind.UNKNOWN.value)
        .cast(MEMORY_KIND)
        .alias("dst_memory"),
    )


def sync_rows(export: Export, runtime: pl.DataFrame) -> pl.DataFrame:
    """The synchronization rows on the waiting host thread (``runtime``: the API calls, which
    give the thread where the row lacks one, and what was waited for)."""
    frame = export.fetch("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", SYNC_SPEC)
    if not frame.height:
        return pl.DataFrame()
    frame = export.intervals(frame, "synchronization")
    codes = decode_enum(export.db.enum("ENUM_CUPTI_SYNC_TYPE"), "TYPE_", SYNC_TOKENS, SYNC_CODES, SyncKind.UNKNOWN)
    sync_kind = map_codes(pl.coalesce("sync_type", "old_sync_type"), codes, SyncKind.UNKNOWN.value).fill_null(
        SyncKind.UNKNOWN.value
    )
    stream = pl.when(pl.col("stream") == NA_U32).then(None).otherwise(pl.col("stream"))
    frame = frame.with_columns(
        pl.coalesce(pid_of("gtid"), pid_of("gpid")).alias("pid"),
        tid_of("gtid").alias("tid"),
        stream.alias("stream"),
        sync_kind.alias("sync_kind"),
    )
    # The synchronising API call (same pid and correlationId) gives the waiting thread
    # when the row lacks globalTid, and names what was waited for: some exports
    # (schema 3.13) record cudaDeviceSynchronize with syncType 1, so a recognised
    # sync API name wins over the recorded syncType.
    if runtime.height:
        # only the calls some sync row refers to (a semi join keeps their order), so the
        # first-call-per-key pass runs over thousands of rows, not every API call
        wanted = frame.select("pid", "correlation").drop_nulls().unique()
        callers = (
            runtime.filter(pl.col("correlation").is_not_null())
            .select("pid", "correlation", pl.col("tid").alias("caller_tid"), pl.col("name").alias("caller"))
            .join(wanted, on=["pid", "correlation"], how="semi", maintain_order="left")
            .unique(["pid", "correlation"], keep="first")
        )
        frame = frame.join(callers, on=["pid", "correlation"], how="left", maintain_order="left")
        by_api = pl.lit(None, dtype=STR)
        for pattern, kind in _SYNC_APIS:
            by_api = pl.when(pl.col("caller").str.contains(pattern)).then(pl.lit(kind.value)).otherwise(by_api)
        frame = frame.with_columns(pl.coalesce("tid", "caller_tid").alias("tid"), by_api.alias("api_kind"))
        overridden = frame.filter(
            pl.col("api_kind").is_not_null() & (pl.col("api_kind") != pl.col("sync_kind"))
        ).height
        if overridden:
            export.warnings.append(
                f"{overridden:,} synchronization rows record a syncType that contradicts their API call "
                "(e.g. cudaDeviceSynchronize as an event sync); the API call's meaning was used"
            )
        frame = frame.with_columns(pl.coalesce("api_kind", "sync_kind").alias("sync_kind"))
    frame = frame.with_columns(_waited_event(export, frame).alias("wait_event_correlation"))
    return frame.select(
        pl.lit(EventKind.SYNC.value, dtype=EVENT_KIND).alias("kind"),
        pl.col("sync_kind").replace_strict(_SYNC_NAMES, return_dtype=STR).alias("name"),
        "pid",
        "tid",
        pl.col("device").cast(I32, strict=False),
        "stream",
        "start_ns",
        "dur_ns",
        "correlation",
        pl.col("sync_kind").cast(SYNC_KIND),
        pl.col("stream").alias("wait_stream"),
        "wait_event_correlation",
    )


def _waited_event(export: Export, frame: pl.DataFrame) -> pl.Series:
    """Correlation id of the cudaEventRecord each sync row waits on (CUDA_EVENT.eventSyncId)."""
    none = pl.Series("wait_event_correlation", [None] * frame.height, dtype=I64)
    if frame["event_sync_id"].null_count() == frame.height:
        return none
    records = export.fetch(
        "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
        table_spec(gpid=("globalPid", I64), event_sync_id=("eventSyncId", I64), record=("correlationId", I64)),
    )
    if not records.height:
        return none
    records = (
        records.filter(pl.col("event_sync_id").is_not_null())
        .select(pid_of("gpid").alias("pid"), "event_sync_id", "record")
        .unique(["pid", "event_sync_id"], keep="last")
    )
    joined = frame.select("pid", "event_sync_id").join(
        records, on=["pid", "event_sync_id"], how="left", maintain_order="left"
    )
    return joined["record"].alias("wait_event_correlation")


def _cpu_rows(export: Export, frame: pl.DataFrame, kind: pl.Expr, what: str) -> pl.DataFrame:
    """Rows of a CPU-thread table (``what`` names it in warnings) as events of ``kind``."""
    frame = export.intervals(export.name(frame, "name_id", "name"), what)
    return frame.select(
        kind.cast(EVENT_KIND).alias("kind"),
        "name",
        pid_of("gtid").alias("pid"),
        tid_of("gtid").alias("tid"),
        "start_ns",
        "dur_ns",
        *([pl.col("correlation")] if "correlation" in frame.columns else []),
    )


def osrt_rows(export: Export) -> pl.DataFrame:
    """The OS runtime calls (its profiling start and finish markers as instants)."""
    frame = export.fetch("OSRT_API", OSRT_SPEC)
    if not frame.height:
        return pl.DataFrame()
    kind = (
        pl.when(pl.col("event_class").is_in(OSRT_MARKERS))
        .then(pl.lit(EventKind.INSTANT.value))
        .otherwise(pl.lit(EventKind.OS_CALL.value))
    )
    return _cpu_rows(export, frame, kind, "OS runtime")


def profiler_overhead_rows(export: Export) -> pl.DataFrame:
    """The profiler's own overhead rows."""
    frame = export.fetch("PROFILER_OVERHEAD", PROFILER_OVERHEAD_SPEC)
    if not frame.height:
        return pl.DataFrame()
    return _cpu_rows(export, frame, pl.lit(EventKind.OVERHEAD.value), "profiler overhead")


def cupti_overhead_rows(export: Export) -> pl.DataFrame:
    """CUPTI's overhead rows: the profiler-caused ones as ``overhead``, the CUDA-caused ones (such
    as "Command Buffer Full") as ``other``."""
    frame = export.fetch("CUPTI_ACTIVITY_KIND_OVERHEAD", CUPTI_OVERHEAD_SPEC)
    if not frame.height:
        return pl.DataFrame()
    by_profiler = decode_enum(
        export.db.enum("ENUM_CUPTI_OVERHEAD_TYPE"), "OVERHEAD_", OVERHEAD_TOKENS, PROFILER_OVERHEAD_CODES, False
    )
    profiler = [code for code, is_profiler in by_profiler.items() if is_profiler]
    kind = (
        pl.when(pl.col("overhead_type").is_in(profiler))
        .then(pl.lit(EventKind.OVERHEAD.value))
        .otherwise(pl.lit(EventKind.OTHER.value))
    )
    return _cpu_rows(export, frame, kind, "CUPTI overhead")
