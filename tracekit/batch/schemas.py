"""The Parquet tables ``tracekit batch`` writes: every column, its type and meaning, once.

docs/batch.md's column reference is generated from these schemas (``scripts/gen_docs.py``).
Times are ms in ``*_ms`` columns (per step unless the name says otherwise), integer ns in
``*_ns`` columns; shares are fractions in 0..1.  New columns may be added; existing columns
keep their name, type and meaning (``BATCH_SCHEMA_VERSION`` changes otherwise).
"""

from __future__ import annotations

import polars as pl

from ..analysis.causes import CAUSES
from ..analysis.efficiency import OP_EFFICIENCY
from ..schema import Column, TableSchema

#: version of the batch tables; stored in batch.json and checked before reusing old results
BATCH_SCHEMA_VERSION = 1

I32 = pl.Int32()
I64 = pl.Int64()
F64 = pl.Float64()
STR = pl.String()
BOOL = pl.Boolean()
LIST_I32 = pl.List(pl.Int32())
LIST_I64 = pl.List(pl.Int64())
LIST_F64 = pl.List(pl.Float64())
LIST_STR = pl.List(pl.String())
TIME = pl.Datetime("ns", "UTC")

_CAUSE_COLUMNS = tuple(
    Column(f"{c}_ms", F64, f"Step time spent on `{c}`, ms per step (complete steps; see docs/analysis.md).") for c in CAUSES
) + tuple(Column(f"{c}_share", F64, f"Share of step time spent on `{c}` (the shares of a trace sum to 1).") for c in CAUSES)

TRACES = TableSchema(
    "traces",
    "One row per input file. A file that could not be analysed has `error` set and null results.",
    (
        Column("path", STR, "Absolute path of the file."),
        Column("content_hash", STR, "BLAKE2b-160 of the file's bytes (hex): identical files have identical hashes."),
        Column("size_bytes", I64, "File size, bytes."),
        Column("mtime_ns", I64, "File modification time, ns since the epoch."),
        Column("tracekit_version", STR, "tracekit version that analysed the file."),
        Column("format", STR, "`kineto` or `nsys` (null when unreadable)."),
        Column("format_version", STR, "Format version as the file states it."),
        Column("producer", STR, "Producer (PyTorch / nsys version) when known."),
        Column("job", STR, "Job the file belongs to (see jobs.parquet); null for failed files."),
        Column("rank", I32, "Rank of the file in its job; null when the file holds several ranks."),
        Column("ranks", LIST_I32, "Job ranks found in the file (several for an Nsight capture of several processes)."),
        Column("file_ranks", LIST_I32, "The same ranks as the file numbers them."),
        Column("file_pids", LIST_I64, "Process id of each file rank, when known."),
        Column("rank_source", STR, "How the rank was decided: distributed_info, capture_metadata, file_name, process_order, file_order, single."),
        Column("rank_trusted", BOOL, "The trace itself states its rank (Kineto distributedInfo, Nsight rank thread names)."),
        Column("world_size", I32, "World size the trace states."),
        Column("captured_at", TIME, "Time of the first event (UTC), when the trace has an epoch clock."),
        Column("start_ns", I64, "First instant covered by events, ns."),
        Column("end_ns", I64, "Last instant covered by events, ns."),
        Column("gpu", STR, "GPU name(s) used, comma-separated."),
        Column("events", I64, "Rows of the canonical events table."),
        Column("steps", I64, "Complete steps found."),
        Column("step_source", STR, "Where the steps came from (profiler_step, user_step, optimizer, dataloader, periodicity, whole_trace)."),
        Column("step_ms_median", F64, "Median step time, ms."),
        Column("step_ms_mean", F64, "Mean step time, ms."),
        Column("gpu_utilization", F64, "GPU busy share of step time (primary device of each rank)."),
        Column("gpu_idle_s", F64, "GPU idle time summed over the complete steps of every rank, seconds: what the capture wasted."),
        *_CAUSE_COLUMNS,
        Column("mfu", F64, "Model FLOPs utilization over the complete steps (null without record_shapes or an unknown GPU; see docs/efficiency.md)."),
        Column("mfu_dtype", STR, "The dtype whose peak MFU is measured against (bf16, fp16, tf32, fp32, fp8)."),
        Column("model_tflops", F64, "Model TFLOP/s achieved over the complete steps (GEMM, convolution and attention FLOPs)."),
        Column("mfu_note", STR, "The MFU headline, or why MFU is missing (e.g. capture with record_shapes=True)."),
        Column("busy_efficient_share", F64, "Share of step time the modelled operators would take at the roofline."),
        Column("busy_inefficient_share", F64, "Share of step time the modelled operators spent below the roofline."),
        Column("top_finding", STR, "Kind of the costliest finding (null when none)."),
        Column("top_finding_ms", F64, "Its cost, ms per step."),
        Column("findings", I32, "Number of findings (rows in findings.parquet with scope `trace`)."),
        Column("data_quality", LIST_STR, "What the trace lacks for a full answer, in words."),
        Column("warnings", LIST_STR, "Parser warnings."),
        Column("truncated", BOOL, "The file was truncated and salvaged."),
        Column("error", STR, "Why the file could not be analysed (null on success)."),
        Column("error_kind", STR, "Class of the failure: the tracekit error (TraceFormatError...), `worker_crash` (the process analysing the file was killed), `memory_limit` (over --max-memory-per-file) or `internal`."),
        Column("seconds", F64, "Wall time of this file's analysis in its worker, s (not comparable between runs)."),
    ),
)

FINDINGS = TableSchema(
    "findings",
    "One row per finding: per trace (`scope = trace`, the findings of `tracekit analyze FILE`) and per job "
    "(`scope = job`: stragglers, load imbalance, exposed communication across ranks).",
    (
        Column("scope", STR, "`trace` or `job`."),
        Column("job", STR, "Job of the trace (or the job the finding is about)."),
        Column("path", STR, "The trace file (null for job findings)."),
        Column("content_hash", STR, "Content hash of the trace file (null for job findings)."),
        Column("rank", I32, "Rank of the trace (null for job findings and multi-rank files)."),
        Column("position", I32, "1 for the costliest finding of the trace or job, 2 for the next..."),
        Column("kind", STR, "Finding kind (docs/json-report.md; job findings: straggler, load_imbalance, exposed_communication)."),
        Column("title", STR, "One-line title."),
        Column("ms_per_step", F64, "Cost, ms per step."),
        Column("share_of_step", F64, "Cost as a share of the step time."),
        Column("steps_affected", I64, "Steps where the cause appears."),
        Column("worst_steps", LIST_I64, "Steps where it costs most."),
        Column("evidence", STR, "Evidence as a JSON object (kind-specific; see docs/json-report.md)."),
        Column("fix", STR, "What to change."),
    ),
)

JOBS = TableSchema(
    "jobs",
    "One row per job: the files of one capture, with the comparison across ranks. A file with no "
    "other rank is a job of one rank (the cross-rank columns are null).",
    (
        Column("job", STR, "Job name: its capture folder, or folder/name-with-`*`-for-the-rank, or the file."),
        Column("folder", STR, "Folder holding the job's files."),
        Column("files", I32, "Trace files in the job."),
        Column("paths", LIST_STR, "Those files."),
        Column("n_ranks", I32, "Ranks present."),
        Column("ranks", LIST_I32, "Rank numbers present (sorted)."),
        Column("world_size", I32, "World size the traces state (may exceed n_ranks when only some ranks were kept)."),
        Column("aligned_steps", I32, "Complete steps present on every rank (the steps compared)."),
        Column("step_ms_median", F64, "Median step time over the compared steps and ranks, ms."),
        Column("rank_step_ms", LIST_F64, "Median step time of each rank, ms (same order as `ranks`)."),
        Column("rank_compute_ms", LIST_F64, "Compute (busy, not communication) per step of each rank, ms (same order)."),
        Column("gpu_utilization", F64, "Mean over ranks of the GPU busy share of the compared steps."),
        Column("gpu_idle_s", F64, "GPU idle time over every rank's complete steps, seconds."),
        Column("imbalance", F64, "Load imbalance: max / mean - 1 of compute per step over ranks."),
        Column("imbalance_ms", F64, "max - mean compute per step over ranks, ms."),
        Column("compute_spread_ms", F64, "max - min compute per step over ranks, ms."),
        Column("stragglers", LIST_I32, "Ranks that arrive late at collectives (or at step starts)."),
        Column("straggler_basis", STR, "How lateness was measured: collective_start or step_start."),
        Column("straggle_ms", F64, "What stragglers cost: the longest wait of a rank in its collectives, ms per step."),
        Column("exposed_communication_ms", F64, "Mean over ranks of the time only communication runs, ms per step."),
        Column("exposed_communication_share", F64, "The same as a share of the step time."),
        Column("wait_ms", F64, "Of the exposed communication: mean time waiting for late ranks, ms per step."),
        Column("matched_collectives", I64, "Collectives matched across ranks (see `collective_matching`)."),
        Column("top_finding", STR, "Costliest finding: a job finding, else the costliest finding of any rank."),
        Column("top_finding_ms", F64, "Its cost, ms per step."),
        Column("notes", LIST_STR, "What limited the comparison, in words."),
        Column("job_step_ms", F64, "Job model (docs/critical-path.md): median time between the last collectives of consecutive steps, ms."),
        Column("critical_rank", I32, "The rank the job's cross-rank critical path spends most time in."),
        Column("straggler_fixed_step_ms", F64, "Predicted job step with the slowest rank at the median rank's speed, ms."),
        Column("overlap_step_ms", F64, "Predicted job step with communication perfectly overlapped, ms."),
        Column("collective_matching", STR, "How the job model matched collectives across ranks: by process group and sequence number, order within the group, or order within the operation and step."),
        Column("job_model_note", STR, "Why the job model's predictions are empty (no coupling, side-stream communication without launch links, replay off the recorded step), null when they are given."),
    ),
)

RANKS = TableSchema(
    "ranks",
    "One row per rank of every job (the per-rank columns of the cross-rank comparison).",
    (
        Column("job", STR, "Job name."),
        Column("rank", I32, "Rank in the job."),
        Column("path", STR, "File holding the rank."),
        Column("file_rank", I32, "The rank as the file numbers it."),
        Column("rank_source", STR, "How the rank was decided (see traces.rank_source)."),
        Column("step_source", STR, "Where the rank's steps came from."),
        Column("steps", I64, "Steps compared (aligned steps, or the rank's complete steps when none align)."),
        Column("step_ms_median", F64, "Median step time, ms."),
        Column("gpu_utilization", F64, "GPU busy share over the compared steps."),
        Column("gpu_busy_ms", F64, "GPU busy time, ms per step."),
        Column("compute_ms", F64, "Busy time other than communication, ms per step."),
        Column("communication_ms", F64, "Time communication kernels run, ms per step."),
        Column("exposed_communication_ms", F64, "Time only communication runs, ms per step."),
        Column("wait_ms", F64, "Time waiting inside collectives for later ranks, ms per step."),
        Column("late_ms", F64, "How late the rank starts matched collectives after the earliest rank (summed per step), ms."),
        Column("step_start_late_ms", F64, "How late the rank starts its steps after the earliest rank (median), ms."),
        Column("clock_offset_ms", F64, "Clock offset estimated from collective end times, ms (subtracted before comparing)."),
        Column("straggler", BOOL, "The rank is a straggler."),
        Column("top_finding", STR, "Costliest finding of the rank's own diagnosis."),
    ),
)

STEPS = TableSchema(
    "steps",
    "One row per step of every rank: the accounting on the rank's primary GPU, aligned by step number.",
    (
        Column("job", STR, "Job name."),
        Column("rank", I32, "Rank in the job."),
        Column("path", STR, "File holding the rank."),
        Column("file_rank", I32, "The rank as the file numbers it."),
        Column("step", I64, "Step number (ProfilerStep#N, or position for index-based step sources)."),
        Column("start_ns", I64, "Step start on the rank's clock, ns."),
        Column("end_ns", I64, "Step end, ns."),
        Column("dur_ns", I64, "Step duration, ns."),
        Column("complete", BOOL, "A whole iteration (partial windows are kept but not compared)."),
        Column("device", I32, "The rank's primary GPU."),
        Column("gpu_busy_ns", I64, "Busy time of that GPU in the step, ns."),
        Column("compute_ns", I64, "Busy time other than communication-only and pageable-copy-only time, ns."),
        Column("communication_ns", I64, "Time communication kernels run, ns."),
        Column("exposed_communication_ns", I64, "Time only communication runs (or the host waits in a collective), ns."),
        Column("start_late_ns", I64, "Step start after the earliest rank's (clock-corrected), ns; null when steps are not compared."),
        Column("late_ns", I64, "Lateness at the step's matched collectives, ns."),
        Column("wait_ns", I64, "Waiting for later ranks inside the step's collectives, ns."),
    ),
)

COLLECTIVES = TableSchema(
    "collectives",
    "One row per communication kernel on each rank's primary GPU, matched to its step.",
    (
        Column("job", STR, "Job name."),
        Column("rank", I32, "Rank in the job."),
        Column("path", STR, "File holding the rank."),
        Column("file_rank", I32, "The rank as the file numbers it."),
        Column("step", I64, "Step the kernel starts in."),
        Column("op", STR, "Operation: allreduce, allgather, reducescatter, alltoall, broadcast, sendrecv, reduce, barrier, other."),
        Column("seq", I64, "Order of this operation within the step (0, 1, ...)."),
        Column("group", STR, "Process group as the trace names it (empty when it does not)."),
        Column("group_seq", I64, "The group's sequence number of the collective when the trace records it."),
        Column("group_order", I64, "Order of this operation within the step and process group (0, 1, ...)."),
        Column("name", STR, "Kernel name."),
        Column("device", I32, "GPU."),
        Column("stream", I64, "Stream."),
        Column("start_ns", I64, "Kernel start, ns (the rank's clock)."),
        Column("end_ns", I64, "Kernel end, ns."),
        Column("dur_ns", I64, "Kernel duration, ns."),
    ),
)

OPS = TableSchema(
    "ops",
    "One row per trace, rank and operator shape: the per-operator efficiency table of `tracekit export` "
    "(efficiency.parquet, docs/efficiency.md) for every trace captured with `record_shapes=True`, one rank at a "
    "time. Traces without shapes have no rows (`traces.mfu_note` says why).",
    (
        Column("job", STR, "Job name."),
        Column("path", STR, "The trace file."),
        Column("content_hash", STR, "Content hash of the trace file."),
        Column("rank", I32, "Rank in the job."),
        Column("file_rank", I32, "The rank as the file numbers it."),
        Column("gpu", STR, "The GPU the peaks are taken from (the device most of the operators' time ran on), as the trace names it."),
        Column("peak_model", STR, "Its entry in the peak table (docs/efficiency.md); null when the GPU is unknown (no roofline columns)."),
        *(c for c in OP_EFFICIENCY.columns if c.name != "share_of_gpu_time"),
        Column("share_of_gpu_time", F64, "Share of the rank's modelled operators' GPU time."),
        Column("ms_per_step", F64, "GPU time of these calls per complete step of the rank, ms (null without complete steps)."),
    ),
)

#: every output table, in the order they are written and documented
BATCH_TABLES: tuple[TableSchema, ...] = (TRACES, FINDINGS, JOBS, RANKS, STEPS, COLLECTIVES, OPS)


def batch_schema_markdown() -> str:
    """docs/batch.md's column reference, generated from these schemas."""
    return "\n".join(t.describe_markdown() for t in BATCH_TABLES)


__all__ = [
    "BATCH_SCHEMA_VERSION", "BATCH_TABLES", "COLLECTIVES", "FINDINGS", "JOBS", "OPS", "RANKS", "STEPS", "TRACES", "batch_schema_markdown",
]
