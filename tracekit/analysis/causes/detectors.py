"""The built-in causes' detectors: which host intervals mark each cause.

A detector takes the trace's host events (:class:`HostEvents`) and returns the intervals that
mark its cause (rows of :data:`HOST_CATEGORY_COLUMNS`).  Overlaps between causes are settled by
the registry's order, not here: the first cause whose detector marks an instant claims it.
Name patterns come from :mod:`tracekit.analysis.patterns`.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ...schema import GPU_ACTIVITY_KINDS, LAUNCH_KINDS, EventKind
from .. import patterns
from ..classify import is_api_call, is_data_dependent_op, is_host_sync
from ..intervals import enclosing

#: the columns of the events table a detector's host frame carries (a copy of every host
#: event's other columns would cost more memory than the analysis)
HOST_CATEGORY_COLUMNS = ["event_id", "kind", "name", "rank", "pid", "tid", "start_ns", "dur_ns", "end_ns", "sync_kind"]

#: what counts as host work of some kind (the catch-all after every cause's detector)
_CPU_WORK = [
    EventKind.CPU_OP.value,
    EventKind.ANNOTATION.value,
    EventKind.PYTHON.value,
    EventKind.RUNTIME.value,
    EventKind.DRIVER.value,
]


@dataclass(frozen=True)
class HostEvents:
    """What a detector reads: the host events of threads (``host``: :data:`HOST_CATEGORY_COLUMNS`,
    positive durations), and the whole events and links tables."""

    host: pl.DataFrame
    events: pl.DataFrame
    links: pl.DataFrame

    @classmethod
    def of(cls, events: pl.DataFrame, links: pl.DataFrame) -> HostEvents:
        host = events.select(HOST_CATEGORY_COLUMNS).filter(
            pl.col("tid").is_not_null() & pl.col("pid").is_not_null() & (pl.col("dur_ns") > 0)
        )
        return cls(host=host, events=events, links=links)


def not_step() -> pl.Expr:
    """Not a step range (ProfilerStep#N, user step ranges): those span everything."""
    name = pl.col("name")
    return ~name.str.contains(patterns.PROFILER_STEP) & ~name.str.contains(patterns.USER_STEP)


def data_loading_ranges(h: HostEvents) -> pl.DataFrame:
    """DataLoader / ``__next__`` / collate / data-pipeline ranges."""
    kinds = [EventKind.ANNOTATION.value, EventKind.CPU_OP.value, EventKind.PYTHON.value]
    return h.host.filter(pl.col("kind").is_in(kinds) & pl.col("name").str.contains(patterns.DATALOADER) & not_step())


def pageable_copy_calls(h: HostEvents) -> pl.DataFrame:
    """Copy calls whose GPU copy touches pageable memory, and the user-level operator around
    each (``.to(device)`` → ``aten::to``: part of the copy's cost); not the copies a
    data-dependent operator makes (see :func:`_without_data_dependent`)."""
    host = h.host
    pageable_copies = h.events.select("event_id", "kind", "src_memory", "dst_memory").filter(
        (pl.col("kind") == EventKind.MEMCPY.value) & ((pl.col("src_memory") == "pageable") | (pl.col("dst_memory") == "pageable"))
    )
    calls = h.links.join(pageable_copies.select(pl.col("event_id").alias("gpu_event_id")), on="gpu_event_id", how="semi")
    pageable = host.join(calls.select(pl.col("launch_event_id").alias("event_id")).unique(), on="event_id", how="semi")
    pageable = _without_data_dependent(pageable, host)
    if pageable.height:
        ops = host.filter(pl.col("kind") == EventKind.CPU_OP.value)
        outer = enclosing(pageable, ops, "_outer", outermost=True)
        if outer.height:
            ids = pageable.with_row_index("_p").join(outer, on="_p").select(pl.col("_outer").alias("event_id")).unique()
            pageable = pl.concat([pageable, host.join(ids, on="event_id", how="semi")]).unique("event_id")
    return pageable


def _without_data_dependent(copies: pl.DataFrame, host: pl.DataFrame) -> pl.DataFrame:
    """Drop copy calls made inside a data-dependent operator (``.item()``, ``.tolist()``,
    ``nonzero``): the host asked for a value and waits for it, which is a host-device sync,
    not a pinning problem; pinned memory would not remove the wait."""
    if copies.height == 0:
        return copies
    dependent = host.filter(is_data_dependent_op())
    if dependent.height == 0:
        return copies
    inside = enclosing(copies, dependent, "_dd", outermost=True)
    if inside.height == 0:
        return copies
    return copies.with_row_index("_p").join(inside.select("_p"), on="_p", how="anti").drop("_p")


def copy_call_inside(kind: pl.Expr, name: pl.Expr) -> pl.Expr:
    """An API call other than a copy (CUDA initialisation, an allocation): inside a copy
    operator it keeps its own meaning; only the copy call and the operators' own time are the
    copy's cost."""
    return kind.is_in(LAUNCH_KINDS) & ~name.str.contains(patterns.MEMCPY_API)


def sync_calls(h: HostEvents) -> pl.DataFrame:
    """Synchronising calls, explicit sync rows and data-dependent operators (:func:`.classify.is_host_sync`)."""
    return h.host.filter(is_host_sync())


def allocator_calls(h: HostEvents) -> pl.DataFrame:
    """``cudaMalloc``/``cudaFree``-style calls."""
    return h.host.filter(is_api_call() & pl.col("name").str.contains(patterns.ALLOCATOR_API))


def collective_calls(h: HostEvents) -> pl.DataFrame:
    """CPU-side collective calls (waiting on communication)."""
    kinds = [EventKind.CPU_OP.value, EventKind.ANNOTATION.value]
    return h.host.filter(pl.col("kind").is_in(kinds) & pl.col("name").str.contains(patterns.COMM_OP))


def other_host_work(h: HostEvents) -> pl.DataFrame:
    """Any operator, range, Python function or API call that is not a step range: the host
    work no cause's detector claimed is launch overhead or other host work by its length."""
    return h.host.filter(pl.col("kind").is_in(_CPU_WORK) & not_step())


def communication_kernel() -> pl.Expr:
    """NCCL/RCCL-style communication kernels."""
    return (pl.col("kind") == EventKind.KERNEL.value) & pl.col("name").str.contains(patterns.COMM_KERNEL)


def pageable_copy() -> pl.Expr:
    """A copy from/to pageable host memory."""
    return (pl.col("kind") == EventKind.MEMCPY.value) & ((pl.col("src_memory") == "pageable") | (pl.col("dst_memory") == "pageable"))


def fp32_matmul_kernel() -> pl.Expr:
    """fp32 GEMM/convolution kernels that do not use tensor cores."""
    return (pl.col("kind") == EventKind.KERNEL.value) & pl.col("name").str.contains(patterns.FP32_GEMM_KERNEL)


def kernel() -> pl.Expr:
    """Any kernel."""
    return pl.col("kind") == EventKind.KERNEL.value


def any_activity() -> pl.Expr:
    """Any GPU activity (copies and memsets, after the kernels)."""
    return pl.lit(True)


_GPU_WORK = list(GPU_ACTIVITY_KINDS)
#: a device→host copy of at most this many bytes reads a few elements (a scalar, a short row)
ELEMENT_BYTES = 256
#: this many element reads in a row on one thread, each waiting for the GPU, are a loop
MIN_ELEMENT_READS = 16


def element_reads(events: pl.DataFrame) -> pl.DataFrame:
    """Every element read: a device→host copy of at most :data:`ELEMENT_BYTES` whose call the
    host waited on before it launched anything else (``t[i].item()``, ``t[i].cpu()``), with the
    outermost operator around the call.  Columns rank, pid, tid, call_id, start_ns (the
    operator's, else the call's), end_ns (the wait's end, at least the operator's), op, bytes."""
    copies = events.filter(
        (pl.col("kind") == EventKind.MEMCPY.value) & (pl.col("memcpy_kind") == "DtoH") & (pl.col("bytes") <= ELEMENT_BYTES)
        & pl.col("correlation").is_not_null()
    ).select("rank", "correlation", "bytes")
    none = pl.DataFrame(schema={"rank": pl.Int32, "pid": pl.Int64, "tid": pl.Int64, "call_id": pl.Int64, "start_ns": pl.Int64,
                                "end_ns": pl.Int64, "op": pl.String, "bytes": pl.Int64})
    if copies.height == 0:  # (the usual case: the joins below go over every launch of the trace)
        return none
    calls = events.filter(is_api_call() & pl.col("tid").is_not_null() & pl.col("correlation").is_not_null())
    launched = events.filter(pl.col("kind").is_in(_GPU_WORK) & pl.col("correlation").is_not_null()).select("rank", "correlation").unique()
    launches = calls.join(launched, on=["rank", "correlation"], how="semi").select(
        "rank", "pid", "tid", "event_id", "correlation", "start_ns", "end_ns"
    ).sort("start_ns")
    launches = launches.with_columns(pl.col("start_ns").shift(-1).over(["rank", "pid", "tid"]).alias("_next_launch"))
    reads = launches.join(copies, on=["rank", "correlation"], how="inner")
    if reads.height == 0:
        return none
    # the host waits for the copy (a sync call or row starting after the copy's call, before the
    # thread's next launch), or the copy's call itself blocks
    waits = events.filter(is_host_sync() & ~is_data_dependent_op() & pl.col("tid").is_not_null()).select(
        "rank", "pid", "tid", pl.col("start_ns").alias("_ws"), pl.col("end_ns").alias("_we")
    ).sort("_ws")
    reads = reads.sort("start_ns").join_asof(waits, left_on="start_ns", right_on="_ws", by=["rank", "pid", "tid"], strategy="forward",
                                             check_sortedness=False)
    waited = pl.col("_ws").is_not_null() & (pl.col("_next_launch").is_null() | (pl.col("_ws") < pl.col("_next_launch")))
    reads = reads.filter(waited).with_columns(pl.col("event_id").alias("call_id"))
    ops = events.filter((pl.col("kind") == EventKind.CPU_OP.value) & pl.col("tid").is_not_null() & not_step())
    points = reads.select("pid", "tid", "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns")).with_row_index("_p")
    outer = enclosing(points, ops, "_op", outermost=True, take="event_id")
    found = outer.select("_p", "_op").join(ops.select(pl.col("event_id").alias("_op"), pl.col("name").alias("op"),
                                                      pl.col("start_ns").alias("_os"), pl.col("end_ns").alias("_oe")), on="_op")
    reads = reads.with_row_index("_p").join(found, on="_p", how="left")
    return reads.select(
        pl.col("rank").cast(pl.Int32), pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64), pl.col("call_id").cast(pl.Int64),
        pl.coalesce("_os", "start_ns").alias("start_ns"), pl.max_horizontal("_we", "_oe").alias("end_ns"), "op", pl.col("bytes").cast(pl.Int64),
    ).sort("start_ns")


def _read_runs(events: pl.DataFrame) -> pl.DataFrame:
    """Every element read (:func:`element_reads`) with ``_run``, its run of reads in a row on
    one thread with no other launch between them, and ``_reads``, the run's length."""
    reads = element_reads(events)
    if reads.height == 0:
        return reads.with_columns(pl.lit(0, dtype=pl.UInt32).alias("_run"), pl.lit(0, dtype=pl.UInt32).alias("_reads"))
    # every launch call of the reading threads, in order: a run of reads is a loop
    calls = events.filter(is_api_call() & pl.col("tid").is_not_null() & pl.col("correlation").is_not_null())
    launched = events.filter(pl.col("kind").is_in(_GPU_WORK)).select("rank", "correlation").unique()
    launches = calls.join(launched, on=["rank", "correlation"], how="semi").join(
        reads.select("pid", "tid").unique(), on=["pid", "tid"], how="semi"
    ).select("rank", "pid", "tid", pl.col("event_id").alias("call_id"), "start_ns").sort("start_ns")
    launches = launches.join(reads.select("call_id", pl.lit(True).alias("_read")), on="call_id", how="left").with_columns(
        pl.col("_read").fill_null(False)
    )
    key = ["rank", "pid", "tid"]
    launches = launches.with_columns((pl.col("_read") != pl.col("_read").shift(1).over(key)).fill_null(True).cum_sum().over(key).alias("_run"))
    runs = launches.filter(pl.col("_read")).select(*key, "call_id", "_run").join(
        reads.select("call_id", "start_ns", "end_ns", "op", "bytes"), on="call_id"
    )
    return runs.with_columns(pl.len().over([*key, "_run"]).cast(pl.UInt32).alias("_reads"))


def transfer_loops(events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """Loops of element reads (:func:`element_reads`): at least :data:`MIN_ELEMENT_READS` in a
    row on one thread with no other launch between them.  One interval per loop, from the end
    of its first read (which stands for the one transfer of the whole tensor: it waits for the
    GPU work that produced it) to the end of its last one's wait, with ``reads`` (how many),
    ``op`` (the most frequent operator around them) and ``bytes`` (per read, the median)."""
    del links  # copies and calls are matched by correlation id (the findings have no links table)
    schema = {"rank": pl.Int32, "pid": pl.Int64, "tid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "reads": pl.UInt32,
              "op": pl.String, "bytes": pl.Int64}
    runs = _read_runs(events).filter(pl.col("_reads") >= MIN_ELEMENT_READS)
    if runs.height == 0:
        return pl.DataFrame(schema=schema)
    loops = runs.group_by(["rank", "pid", "tid", "_run"]).agg(
        pl.col("end_ns").sort_by("start_ns").first().alias("start_ns"), pl.col("end_ns").max(), pl.len().alias("reads"),
        pl.col("op").drop_nulls().mode().sort().first().alias("op"), pl.col("bytes").median().cast(pl.Int64).alias("bytes"),
    )
    return loops.sort("start_ns").select(list(schema)).cast(schema)  # type: ignore[arg-type]


def scalar_reads(events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """The element reads outside loops (``loss.item()``, a flag read with ``.cpu()``): one
    interval per read, its operator from start to the end of its wait.  Dropping such a read
    (the sync fix: accumulate on the GPU, read every N steps) removes the whole call: the
    operator's host time, its tiny device→host copy and the wait (columns rank, pid, tid,
    start_ns, end_ns).  Loops of reads are :func:`transfer_loops`' (one transfer instead)."""
    del links
    runs = _read_runs(events).filter(pl.col("_reads") < MIN_ELEMENT_READS)
    return runs.select(pl.col("rank").cast(pl.Int32), pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64), "start_ns", "end_ns").sort("start_ns")
