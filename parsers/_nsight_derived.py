"""What the Nsight reader derives from the events table once it is built: ranks, launch
links, the devices and threads tables.
"""

from __future__ import annotations

import polars as pl

from tracekit.schema import DEVICES, GPU_ACTIVITY_KINDS, LAUNCH_KINDS, LINKS, THREADS, EventKind

from ._nsight_export import Export
from ._nsight_schema import GPU_LINK_KINDS, I64, STR, pid_of, table_spec, tid_of

#: a thread named for its rank through NVTX ("MPI Rank 3", "Rank 0")
_RANK_THREAD_NAME = r"^(?:MPI |NCCL )?[Rr]ank (\d+)$"


def ranks_of(events: pl.DataFrame, nvtx_threads: pl.DataFrame) -> tuple[dict[int, int], str]:
    """pid → rank for the processes with CUDA or NVTX activity, and how it was decided: each
    such process is a rank, numbered by its position among their sorted pids, unless every one
    of them named a thread ``MPI Rank N`` / ``Rank N`` with distinct numbers."""
    if not events.height:
        return {}, "none"
    active_kinds = [*LAUNCH_KINDS, *GPU_LINK_KINDS, EventKind.ANNOTATION.value, EventKind.INSTANT.value]
    # Series operations: a query on ``events`` (many chunks, one per source table) would
    # first copy every column of it into one chunk
    pid = events.get_column("pid")
    active = pid.filter(events.get_column("kind").is_in(active_kinds) & pid.is_not_null()).unique().sort().to_list()
    if not active:
        return {}, "none"
    named = (
        nvtx_threads.with_columns(pl.col("thread_name").str.extract(_RANK_THREAD_NAME, 1).cast(I64).alias("r"))
        .filter(pl.col("r").is_not_null())
        .group_by("pid")
        .agg(pl.col("r").unique())
    )
    declared = {int(p): rs for p, rs in named.iter_rows() if p is not None and len(rs) == 1}
    if set(declared) >= set(active):
        chosen = {int(p): int(declared[p][0]) for p in active}
        if len(set(chosen.values())) == len(chosen):
            return chosen, "nvtx_thread_name"
    return {int(p): i for i, p in enumerate(active)}, "pid_order"


def links_table(events: pl.DataFrame) -> pl.DataFrame:
    """Launch links on (pid, correlationId): correlation ids are unique only within a process."""
    keyed = events.select("event_id", "kind", "pid", "correlation").filter(
        pl.col("correlation").is_not_null() & pl.col("pid").is_not_null()
    )
    launches = keyed.filter(pl.col("kind").is_in(LAUNCH_KINDS)).select(
        "pid", "correlation", pl.col("event_id").alias("launch_event_id")
    )
    targets = keyed.filter(pl.col("kind").is_in(GPU_LINK_KINDS)).select(
        "pid", "correlation", pl.col("event_id").alias("gpu_event_id")
    )
    links = launches.join(targets, on=["pid", "correlation"], how="inner").with_columns(
        pl.lit("correlation").alias("link_source")
    )
    return LINKS.conform(links.sort("gpu_event_id", "launch_event_id"))


def orphan_warning(export: Export, events: pl.DataFrame, links: pl.DataFrame) -> None:
    """Warn of the GPU rows that no API call in the export launched."""
    gpu = events.select("event_id", "kind").filter(
        pl.col("kind").is_in(GPU_ACTIVITY_KINDS)
    )
    if not gpu.height:
        return
    linked = gpu.join(links.select(pl.col("gpu_event_id").alias("event_id")).unique(), on="event_id", how="semi")
    orphans = gpu.height - linked.height
    if orphans:
        export.warnings.append(
            f"{orphans:,} of {gpu.height:,} GPU kernels/copies/memsets have no launching API call in the export "
            "(a time-sliced export or API calls not traced)"
        )


def devices_table(export: Export, events: pl.DataFrame) -> pl.DataFrame:
    """The GPUs ``TARGET_INFO_GPU`` describes, and every other device the events use."""
    spec = table_spec(
        device=("id", I64),
        name=("name", STR),
        total_memory_bytes=("totalMemory", I64),
        compute_major=("computeMajor", I64),
        compute_minor=("computeMinor", I64),
        sm_count=("smCount", I64),
    )
    described = export.fetch("TARGET_INFO_GPU", spec).filter(pl.col("device").is_not_null())
    described = described.unique("device", keep="first", maintain_order=True).with_columns(
        pl.lit("nvidia").alias("vendor")
    )
    seen = (
        events.select("device")
        .filter(pl.col("device").is_not_null())
        .select(pl.col("device").cast(I64).unique())
        .join(described.select("device"), on="device", how="anti")
        .with_columns(pl.lit("nvidia").alias("vendor"))
    )
    frame = pl.concat([described, seen], how="diagonal_relaxed").sort("device")
    return DEVICES.conform(frame)


def threads_table(export: Export, events: pl.DataFrame, nvtx_threads: pl.DataFrame) -> pl.DataFrame:
    """Process, thread (an NVTX name before the OS one) and CUDA stream names."""
    names = export.fetch(
        "ThreadNames", table_spec(name_id=("nameId", I64), priority=("priority", I64), gtid=("globalTid", I64))
    )
    os_threads = (
        export.name(names, "name_id", "os_name")
        .filter(pl.col("gtid").is_not_null())
        .select(pid_of("gtid").alias("pid"), tid_of("gtid").alias("tid"), "os_name", "priority")
        .sort("priority", descending=True, nulls_last=True, maintain_order=True)
        .unique(["pid", "tid"], keep="first", maintain_order=True)
        .drop("priority")
    )
    threads = os_threads.join(nvtx_threads, on=["pid", "tid"], how="full", coalesce=True).select(
        "pid", "tid", pl.coalesce("thread_name", "os_name").alias("thread_name")
    )
    processes = export.fetch("PROCESSES", table_spec(gpid=("globalPid", I64), name=("name", STR)))
    processes = (
        processes.filter(pl.col("gpid").is_not_null())
        .select(pid_of("gpid").alias("pid"), pl.col("name").alias("process_name"))
        .unique("pid", keep="first")
    )
    used_pids = (
        pl.concat([events.select("pid"), threads.select("pid")], how="vertical_relaxed")
        .filter(pl.col("pid").is_not_null())
        .unique()
    )
    process_rows = used_pids.join(processes, on="pid", how="left").with_columns(
        pl.lit(None, dtype=I64).alias("tid")
    )
    threads = threads.join(processes, on="pid", how="left")
    streams = export.fetch(
        "TARGET_INFO_NVTX_CUDA_STREAM",
        table_spec(device=("deviceId", I64), stream=("streamId", I64), thread_name=("name", STR)),
    )
    frame = pl.concat([process_rows, threads, streams], how="diagonal_relaxed")
    frame = frame.sort(["pid", "tid", "device", "stream"], nulls_last=False)
    return THREADS.conform(frame)
