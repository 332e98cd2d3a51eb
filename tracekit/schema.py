"""The canonical trace tables: every column tracekit knows, named once, with its unit.

Parsers (Kineto JSON, Nsight Systems SQLite) translate their format into these tables and
nothing else; analyses read only these tables.  A column name carries its unit
(``start_ns``, ``dur_ns``, ``bytes``, ``total_memory_bytes``); identifiers are plain
integers; categorical values are :class:`polars.Enum` types declared here.

Conventions (they hold for every parser):

* Times are integers in nanoseconds on one absolute clock per trace (Kineto: epoch-based
  ``ts`` plus ``baseTimeNanoseconds``; Nsight: the session clock plus
  ``utcEpochNs`` when the export has it).  ``end_ns = start_ns + dur_ns`` always.
* A CPU row is placed by ``(pid, tid)``; a GPU row (kernel, memcpy, memset, GPU
  annotation) by ``(device, stream)`` and has a null ``tid``.  Synchronisation rows
  carry the waiting host thread in ``(pid, tid)`` when the format records it, and the
  device/stream waited on.
* ``rank`` is the distributed rank of the process that owns the row (0 when unknown).
* Rows are sorted by ``start_ns`` (longest first on ties, so parents precede children)
  and ``event_id`` is the row's position in that order: results do not depend on the
  order of events in the input file.

:class:`TraceTables` bundles one trace's tables with its :class:`TraceInfo`; it is what
``tracekit.read_trace`` returns and what the cache stores.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import polars as pl

#: Version of the canonical schema; part of the cache key, bumped on any column change.
SCHEMA_VERSION = 3


class EventKind(str, Enum):
    """What a row of the events table is."""

    CPU_OP = "cpu_op"  #: an operator (aten::mm, autograd nodes)
    ANNOTATION = "annotation"  #: a user/NVTX range on a CPU thread (ProfilerStep#3, "forward")
    GPU_ANNOTATION = "gpu_annotation"  #: a user range projected onto a GPU stream
    PYTHON = "python"  #: a Python function frame (with_stack traces)
    RUNTIME = "runtime"  #: a CUDA/HIP runtime API call (cudaLaunchKernel, cudaMemcpyAsync)
    DRIVER = "driver"  #: a CUDA driver API call (cuLaunchKernel)
    KERNEL = "kernel"  #: a GPU kernel (or accelerator op)
    MEMCPY = "memcpy"  #: a GPU copy
    MEMSET = "memset"  #: a GPU memset
    SYNC = "sync"  #: a host-device synchronisation record (cuda_sync, CUPTI SYNCHRONIZATION)
    OS_CALL = "os_call"  #: an OS runtime call (Nsight OSRT: sem_wait, read, ioctl)
    INSTANT = "instant"  #: a zero-length mark (NVTX mark, cpu_instant_event)
    OVERHEAD = "overhead"  #: profiler overhead (CUPTI buffer flush, nsys overhead)
    OTHER = "other"  #: anything else the format recorded


#: ``kind`` values whose intervals make a GPU busy.
GPU_ACTIVITY_KINDS: tuple[str, ...] = (EventKind.KERNEL.value, EventKind.MEMCPY.value, EventKind.MEMSET.value)
#: ``kind`` values that live on a GPU timeline (placed by device and stream).
GPU_KINDS: tuple[str, ...] = (*GPU_ACTIVITY_KINDS, EventKind.GPU_ANNOTATION.value)
#: ``kind`` values of the host calls that may launch GPU work (CUDA/HIP runtime and driver API).
LAUNCH_KINDS: tuple[str, ...] = (EventKind.RUNTIME.value, EventKind.DRIVER.value)
#: ``kind`` values that live on a host thread's timeline (placed by pid and tid).
HOST_KINDS: tuple[str, ...] = (
    EventKind.ANNOTATION.value, EventKind.CPU_OP.value, EventKind.PYTHON.value, *LAUNCH_KINDS, EventKind.SYNC.value,
    EventKind.OS_CALL.value,
)


class MemcpyKind(str, Enum):
    """Direction of a copy."""

    HTOD = "HtoD"
    DTOH = "DtoH"
    DTOD = "DtoD"
    HTOH = "HtoH"
    PTOP = "PtoP"
    UNKNOWN = "unknown"


class MemoryKind(str, Enum):
    """Where the source or destination of a copy lives."""

    PAGEABLE = "pageable"
    PINNED = "pinned"
    DEVICE = "device"
    MANAGED = "managed"
    ARRAY = "array"
    UNKNOWN = "unknown"


class SyncKind(str, Enum):
    """What a synchronisation record waited for."""

    EVENT_SYNC = "event_sync"  #: cudaEventSynchronize
    STREAM_WAIT_EVENT = "stream_wait_event"  #: cudaStreamWaitEvent (device-side wait)
    STREAM_SYNC = "stream_sync"  #: cudaStreamSynchronize
    CONTEXT_SYNC = "context_sync"  #: cudaDeviceSynchronize / context synchronize
    UNKNOWN = "unknown"


class LinkSource(str, Enum):
    """How a launch → GPU activity link was established."""

    CORRELATION = "correlation"  #: same CUPTI correlation id (per process)
    FLOW = "flow"  #: a Chrome-trace flow arrow (ac2g/async) bound to both ends


class FlowKind(str, Enum):
    """What a Chrome-trace flow arrow connects."""

    LAUNCH = "launch"  #: CPU launch → GPU activity (ac2g, async, async_gpu, async_cpu_to_gpu)
    FWDBWD = "fwdbwd"  #: forward op → its backward op
    OTHER = "other"


def _enum(values: type[Enum]) -> pl.Enum:
    return pl.Enum([m.value for m in values])


EVENT_KIND = _enum(EventKind)
MEMCPY_KIND = _enum(MemcpyKind)
MEMORY_KIND = _enum(MemoryKind)
SYNC_KIND = _enum(SyncKind)
LINK_SOURCE = _enum(LinkSource)
FLOW_KIND = _enum(FlowKind)


@dataclass(frozen=True)
class Column:
    """One canonical column: its name (with unit), dtype and meaning."""

    name: str
    dtype: pl.DataType
    doc: str


@dataclass(frozen=True)
class TableSchema:
    """A canonical table: an ordered list of columns."""

    name: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def polars_schema(self) -> pl.Schema:
        return pl.Schema({c.name: c.dtype for c in self.columns})

    def empty(self) -> pl.DataFrame:
        """A zero-row frame with this table's columns and dtypes."""
        return pl.DataFrame(schema=self.polars_schema)

    def conform(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Return ``frame`` with exactly this table's columns, in order, with their dtypes.

        Missing columns are added as nulls; extra columns are dropped; dtypes are cast
        (strictly: a value that does not fit is an error, never silently nulled).
        """
        exprs = []
        present = frame.schema  # once: each ``frame.schema`` builds every dtype object anew
        if list(present.items()) == [(c.name, c.dtype) for c in self.columns]:
            return frame  # already exactly this table (a cached table, a parser's output)
        for col in self.columns:
            if col.name in present:
                current = present[col.name]
                expr = pl.col(col.name)
                if current != col.dtype:
                    expr = expr.cast(col.dtype, strict=True)
                exprs.append(expr)
            else:
                exprs.append(pl.lit(None, dtype=col.dtype).alias(col.name))
        return frame.select(exprs)

    def from_columns(self, data: Mapping[str, Any]) -> pl.DataFrame:
        """Build a frame from a mapping of column name → sequence/Series (missing → null)."""
        series = []
        for col in self.columns:
            if col.name not in data:
                continue
            values = data[col.name]
            s = values if isinstance(values, pl.Series) else pl.Series(col.name, values, dtype=col.dtype, strict=False)
            if s.dtype != col.dtype:
                s = s.cast(col.dtype, strict=False)
            series.append(s.alias(col.name))
        return self.conform(pl.DataFrame(series) if series else pl.DataFrame())

    def describe_markdown(self) -> str:
        """A Markdown table of the columns (used to generate docs/schema.md)."""
        lines = [f"### `{self.name}`", "", self.doc, "", "| column | dtype | meaning |", "|---|---|---|"]
        for c in self.columns:
            lines.append(f"| `{c.name}` | `{_dtype_text(c.dtype)}` | {c.doc} |")
        return "\n".join(lines) + "\n"


def _dtype_text(dtype: pl.DataType) -> str:
    if isinstance(dtype, pl.Enum):
        return "Enum(" + ", ".join(dtype.categories.to_list()) + ")"
    return str(dtype)


I64 = pl.Int64()
I32 = pl.Int32()
F64 = pl.Float64()
STR = pl.String()
BOOL = pl.Boolean()

EVENTS = TableSchema(
    "events",
    "Every timed thing the trace recorded: CPU operators, annotations, Python frames, "
    "runtime/driver calls, GPU kernels/copies/memsets, synchronisation records, OS calls, marks.",
    (
        Column("event_id", I64, "Row id: position in (start_ns, -dur_ns) order, unique within the trace."),
        Column("kind", EVENT_KIND, "What the row is (see `EventKind`)."),
        Column("name", STR, "Operator, API, kernel or range name as recorded (runtime API version suffixes stripped)."),
        Column("rank", I32, "Distributed rank of the owning process (0 when unknown)."),
        Column("pid", I64, "Owning process id (for GPU rows: the launching process when known)."),
        Column("tid", I64, "Host thread id (null for rows on a GPU timeline)."),
        Column("device", I32, "GPU index for GPU rows and sync rows; null on CPU rows."),
        Column("stream", I64, "GPU stream id for GPU rows (and the stream a sync waited on); null otherwise."),
        Column("start_ns", I64, "Start time, ns."),
        Column("dur_ns", I64, "Duration, ns (0 for marks)."),
        Column("end_ns", I64, "start_ns + dur_ns."),
        Column("correlation", I64, "CUPTI/roctracer correlation id linking an API call to its GPU activity."),
        Column("external_id", I64, "Profiler external id linking a CPU operator to the API calls it made."),
        Column("bytes", I64, "Bytes moved or set (memcpy/memset)."),
        Column("memcpy_kind", MEMCPY_KIND, "Copy direction (memcpy rows)."),
        Column("src_memory", MEMORY_KIND, "Kind of the copy source memory (pageable/pinned/device...)."),
        Column("dst_memory", MEMORY_KIND, "Kind of the copy destination memory."),
        Column("grid_blocks", I64, "Kernel grid size: product of grid dimensions."),
        Column("block_threads", I64, "Kernel block size: product of block dimensions."),
        Column("registers_per_thread", I32, "Registers per thread of a kernel."),
        Column("shared_memory_bytes", I64, "Shared memory per block of a kernel (static + dynamic)."),
        Column("occupancy_pct", F64, "Estimated achieved occupancy of a kernel, percent."),
        Column("sync_kind", SYNC_KIND, "What a sync row waited for."),
        Column("wait_stream", I64, "Stream a stream-wait-event row makes wait, or the stream a sync waited on."),
        Column("wait_event_correlation", I64, "Correlation id of the cudaEventRecord a sync/wait refers to."),
        Column("sequence_nr", I64, "Autograd sequence number (links forward and backward ops)."),
        Column("python_id", I64, "Python frame id (python rows)."),
        Column("python_parent_id", I64, "Parent Python frame id (python rows)."),
        Column("input_dims", STR, "Operator input shapes as JSON text (record_shapes traces)."),
        Column("input_types", STR, "Operator input dtypes as JSON text, e.g. `[\"c10::BFloat16\", \"float\"]` (record_shapes traces)."),
        Column("concrete_inputs", STR, "Operator scalar arguments as JSON text (strides, paddings, flags; record_shapes traces)."),
        Column("collective", STR, "Collective operation name for communication ops/kernels (all_reduce...)."),
        Column("process_group", STR, "Process group a collective ran in, as the trace names it (Kineto `Process Group Name`)."),
        Column("group_ranks", STR, "Global ranks of that process group as compact JSON list text, e.g. `[0,1]`."),
        Column("group_size", I32, "Number of ranks in that process group."),
        Column("collective_seq", I64, "Sequence number of a collective within its process group, when the trace records it (Kineto `Seq`)."),
        Column("message_elements", I64, "Elements of a collective's input message (Kineto `In msg nelems`)."),
        Column("domain", STR, "Annotation domain (NVTX domain name), null for profiler annotations."),
    ),
)

LINKS = TableSchema(
    "links",
    "CPU → GPU launch links: which runtime/driver call launched which GPU activity or sync record. "
    "A CUDA-graph launch links to many GPU rows.",
    (
        Column("launch_event_id", I64, "event_id of the runtime/driver call."),
        Column("gpu_event_id", I64, "event_id of the kernel/memcpy/memset/sync row it caused."),
        Column("correlation", I64, "The correlation id both rows carry (null for flow-only links)."),
        Column("link_source", LINK_SOURCE, "How the link was found."),
    ),
)

FLOWS = TableSchema(
    "flows",
    "Chrome-trace flow arrows bound to the events they connect (Kineto only).",
    (
        Column("flow_id", I64, "The flow's id as written in the trace."),
        Column("flow_kind", FLOW_KIND, "What the arrow connects."),
        Column("src_event_id", I64, "event_id at the arrow's tail (null when it binds to no event)."),
        Column("dst_event_id", I64, "event_id at the arrow's head (null when it binds to no event)."),
    ),
)

DEVICES = TableSchema(
    "devices",
    "GPUs (or other accelerators) described by the trace.",
    (
        Column("device", I32, "Device index as used by the events table."),
        Column("name", STR, "Marketing name (e.g. NVIDIA A100-SXM4-80GB)."),
        Column("vendor", STR, "nvidia, amd, or other."),
        Column("total_memory_bytes", I64, "Device memory, bytes."),
        Column("compute_major", I32, "Compute capability major (NVIDIA) or gfx major."),
        Column("compute_minor", I32, "Compute capability minor."),
        Column("sm_count", I32, "Streaming multiprocessors / compute units."),
    ),
)

THREADS = TableSchema(
    "threads",
    "Names of processes, threads and GPU streams.",
    (
        Column("pid", I64, "Process id (GPU tracks: null)."),
        Column("tid", I64, "Thread id (null for a process-level row)."),
        Column("device", I32, "Device index for a GPU track."),
        Column("stream", I64, "Stream id for a GPU track."),
        Column("process_name", STR, "Process name."),
        Column("thread_name", STR, "Thread or stream name."),
    ),
)

COUNTERS = TableSchema(
    "counters",
    "Counter tracks (Chrome `ph: C` events): one row per sample and series.",
    (
        Column("name", STR, "Counter track name."),
        Column("series", STR, "Series within the track."),
        Column("pid", I64, "Process the counter belongs to."),
        Column("start_ns", I64, "Sample time, ns."),
        Column("value", F64, "Sample value."),
    ),
)

MEMORY = TableSchema(
    "memory",
    "Allocator events (`[memory]` instants of profile_memory traces, Nsight memory usage).",
    (
        Column("start_ns", I64, "Time of the allocation or free, ns."),
        Column("pid", I64, "Process id."),
        Column("tid", I64, "Thread id."),
        Column("device", I32, "Device index; -1 for host memory."),
        Column("address", I64, "Address of the block (may be null when it does not fit in int64)."),
        Column("bytes", I64, "Size of the block; negative for a free."),
        Column("total_allocated_bytes", I64, "Allocator's total allocated after the event."),
        Column("total_reserved_bytes", I64, "Allocator's total reserved (cached) after the event."),
    ),
)

#: Every table of a trace, in the order they are written to Parquet.
TABLES: tuple[TableSchema, ...] = (EVENTS, LINKS, FLOWS, DEVICES, THREADS, COUNTERS, MEMORY)


@dataclass(frozen=True)
class TraceInfo:
    """What a trace says about itself (one per input file)."""

    #: path of the file as given by the user
    path: str
    #: input format: ``kineto`` or ``nsys``
    format: str
    #: format version as the file states it (Kineto schemaVersion, Nsight export schema)
    format_version: str | None = None
    #: producer details when known (PyTorch / Kineto / nsys version strings)
    producer: str | None = None
    #: distributed rank of this trace (Kineto ``distributedInfo``); None when unknown
    rank: int | None = None
    #: world size when known
    world_size: int | None = None
    #: distributed backend (nccl, gloo, rccl...) when known
    backend: str | None = None
    #: ranks present in this file (an Nsight capture of several processes has several)
    ranks: tuple[int, ...] = (0,)
    #: first and last instants covered by events, ns
    start_ns: int | None = None
    end_ns: int | None = None
    #: True when the file was truncated and salvaged
    truncated: bool = False
    #: problems met while parsing, in plain words (never fatal)
    warnings: tuple[str, ...] = ()
    #: top-level metadata of the file (JSON-compatible), for display and provenance
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        """What the file is (path, format and version, producer, rank, world size, ranks): the
        first keys of ``tracekit info --json`` and of the JSON report's ``trace``."""
        return {
            "path": self.path,
            "format": self.format,
            "format_version": self.format_version,
            "producer": self.producer,
            "rank": self.rank,
            "world_size": self.world_size,
            "ranks": list(self.ranks),
        }

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["ranks"] = list(self.ranks)
        data["warnings"] = list(self.warnings)
        data["metadata"] = dict(self.metadata)
        return json.dumps(data, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> TraceInfo:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["ranks"] = tuple(data.get("ranks") or (0,))
        data["warnings"] = tuple(data.get("warnings") or ())
        return cls(**data)

    def with_changes(self, **changes: Any) -> TraceInfo:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class TraceTables:
    """One trace as canonical tables.  Frames conform to the schemas in this module."""

    info: TraceInfo
    events: pl.DataFrame
    links: pl.DataFrame = field(default_factory=LINKS.empty)
    flows: pl.DataFrame = field(default_factory=FLOWS.empty)
    devices: pl.DataFrame = field(default_factory=DEVICES.empty)
    threads: pl.DataFrame = field(default_factory=THREADS.empty)
    counters: pl.DataFrame = field(default_factory=COUNTERS.empty)
    memory: pl.DataFrame = field(default_factory=MEMORY.empty)

    def table(self, name: str) -> pl.DataFrame:
        """A table by its schema name."""
        if name not in TABLE_NAMES:
            raise KeyError(name)
        frame: pl.DataFrame = getattr(self, name)
        return frame

    def kind_counts(self) -> dict[str, int]:
        """Number of event rows per kind (kinds with no rows are omitted)."""
        counts = self.events.group_by("kind").len().sort("kind")
        return {str(k): int(n) for k, n in counts.iter_rows()}

    def write_parquet(
        self,
        directory: str | Path,
        *,
        compression: str = "zstd",
        statistics: bool = True,
        null_columns: bool = True,
    ) -> list[Path]:
        """Write every table as ``<name>.parquet`` plus ``info.json`` into ``directory``
        (``compression`` and ``statistics`` as for :meth:`polars.DataFrame.write_parquet`).

        ``null_columns=False`` leaves out the columns that hold only nulls (the first column
        always stays, so the row count does too); :meth:`read_parquet` restores them."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for schema in TABLES:
            path = out / f"{schema.name}.parquet"
            frame = self.table(schema.name)
            if not null_columns:
                first = frame.columns[:1]
                frame = frame.select(
                    [c for c in frame.columns if c in first or frame.get_column(c).null_count() < frame.height]
                )
            frame.write_parquet(path, compression=compression, statistics=statistics)  # type: ignore[arg-type]
            written.append(path)
        info_path = out / "info.json"
        info_path.write_text(self.info.to_json() + "\n", encoding="utf-8")
        written.append(info_path)
        return written

    @classmethod
    def read_parquet(cls, directory: str | Path) -> TraceTables:
        """Read tables written by :meth:`write_parquet`."""
        src = Path(directory)
        info = TraceInfo.from_json((src / "info.json").read_text(encoding="utf-8"))
        frames = {s.name: s.conform(pl.read_parquet(src / f"{s.name}.parquet")) for s in TABLES}
        return cls(info=info, **frames)

    def validate(self) -> None:
        """Raise ``AssertionError`` if a frame does not match its schema exactly."""
        for schema in TABLES:
            frame = self.table(schema.name)
            assert frame.schema == schema.polars_schema, (schema.name, frame.schema, schema.polars_schema)


TABLE_NAMES = tuple(s.name for s in TABLES)


def repeated(name: str, value: Any, dtype: pl.DataType, rows: int) -> pl.Series:
    """A column of ``rows`` copies of ``value`` (None: all null), by one native call
    (``pl.repeat`` and a literal's broadcast are a polars query each, tens of times dearer)."""
    column: pl.Series = pl.Series(name, [value], dtype=dtype).new_from_index(0, rows)
    return column


#: columns gathered per query by :func:`finalize_events`
_GATHER_BATCH = 4


def canonical_order(events: pl.DataFrame) -> pl.Series:
    """The row order :func:`finalize_events` sorts ``events`` into (row ``order[i]`` of the
    input becomes event ``i``): by start, longest first, then kind, pid, tid, device,
    stream, name and the input position ``_order``, where those columns exist."""
    keys = ["start_ns", "dur_ns"]
    descending = [False, True]
    for extra in ("kind", "pid", "tid", "device", "stream", "name", "_order"):
        if extra in events.columns:
            keys.append(extra)
            descending.append(False)
    if keys[-1] == "_order":
        position = events.get_column("_order")
        # the sort is stable, so an ``_order`` that already rises with the row position (the
        # Kineto reader's, always) breaks no tie the row position does not: leaving it out
        # spares gathering and encoding one key for every tied row
        if position.null_count() == 0 and position.is_sorted():
            keys.pop()
            descending.pop()
    return _sort_order(events, keys, descending)


def finalize_events(
    events: pl.DataFrame, keep: Sequence[str] = (), names: pl.Series | None = None, order: pl.Series | None = None
) -> pl.DataFrame:
    """Sort events canonically, assign ``event_id`` and ``end_ns``, and conform the schema.

    The input may carry any subset of the event columns plus a temporary ``_order``
    column (input position) used only to break ties deterministically.  Columns named in
    ``keep`` (parser-internal helpers) are appended after the canonical ones.

    The input may be a concatenation of many frames (many chunks per column): nothing here
    rechunks the whole table at once.  Each column is made contiguous and gathered into the
    canonical order on its own, and the source column is released as soon as its sorted
    copy exists, so the peak is the input plus one column (not two tables) when the
    caller hands the frame over.

    ``names``: when given, the input's ``name`` column holds positions in ``names``, the
    distinct event names in sorted order (so the positions sort as the names do); the
    output's ``name`` is gathered from it.  ``order``: :func:`canonical_order` of ``events``
    when the caller already has it.
    """
    # a shallow copy: dropping columns from it releases them only if the caller let go
    frame = events.clone()
    del events
    if "end_ns" in frame.columns:
        frame.drop_in_place("end_ns")
    if order is None:
        order = canonical_order(frame)
    if order.dtype != pl.get_index_type():
        order = order.cast(pl.get_index_type())
    wanted = set(EVENTS.names) | set(keep)
    always = {"start_ns", "dur_ns", *keep}
    columns: dict[str, pl.Series] = {}
    batch: list[pl.Series] = []
    column_names = list(frame.columns)
    for i, name in enumerate(column_names):
        source = frame.drop_in_place(name)
        if name in wanted and (name in always or source.null_count() < source.len()):
            # (an all-null column is not gathered: it is written as nulls below)
            # gathering across chunks is slow for text (up to 25x a contiguous gather)
            source = source.rechunk() if source.n_chunks() > 1 else source
            if _constant(source):
                columns[name] = source  # (its own sorted copy: the rank, a trace's one pid)
            else:
                batch.append(source)
        del source
        if batch and (len(batch) == _GATHER_BATCH or i == len(column_names) - 1):
            # a few columns a call, which polars gathers on its threads side by side, while at
            # most that many sorted copies exist beside the input (a frame's row gather, not a
            # ``select``: the same gathers without the fixed cost of a query)
            for gathered in pl.DataFrame(batch)[order].get_columns():
                columns[gathered.name] = gathered
            batch.clear()
    if names is not None and "name" in columns:
        columns["name"] = names[columns["name"]].alias("name")
    start, dur = columns["start_ns"], columns["dur_ns"]
    rows = start.len()
    columns["end_ns"] = (start + dur).alias("end_ns")
    columns["event_id"] = pl.int_range(0, rows, dtype=pl.Int64, eager=True).alias("event_id")
    # the schema's columns in its order, built from the Series (what :meth:`TableSchema.conform`
    # gives, without a query): a strict cast where the dtype differs, nulls where absent
    out = []
    for col in EVENTS.columns:
        series = columns.get(col.name)
        if series is None:
            series = repeated(col.name, None, col.dtype, rows)
        elif series.dtype != col.dtype:
            series = series.cast(col.dtype, strict=True)
        out.append(series)
    out.extend(columns[k] for k in keep)
    del columns
    return pl.DataFrame(out)


def _constant(column: pl.Series) -> bool:
    """Whether ``column`` is integers, without a null, all of one value (two reductions)."""
    return column.dtype.is_integer() and column.len() > 0 and column.null_count() == 0 and column.min() == column.max()


def _sort_order(frame: pl.DataFrame, keys: Sequence[str], descending: Sequence[bool]) -> pl.Series:
    """The row order of a stable multi-key sort (nulls last), computed cheaply.

    A multi-key sort encodes every key of every row (about 220 bytes a row with event
    names).  Here the rows are sorted by the first key alone and only the rows that tie on
    it (about 2% of a real trace's events) are sorted by every key; they keep the positions
    their tie groups hold, so the result equals the full sort.  Ties are found by comparing
    each sorted value with its neighbours (nulls equal to nulls), not by hashing.
    """
    lead = frame.get_column(keys[0])
    first = pl.DataFrame([lead]).select(
        pl.arg_sort_by(keys[0], descending=descending[0], nulls_last=True, maintain_order=True)
    ).to_series()
    if len(keys) == 1 or first.len() < 2:
        return first
    ordered = lead.rechunk().gather(first)
    same = ordered.slice(1).eq_missing(ordered.slice(0, ordered.len() - 1))
    del ordered
    if not same.any():
        return first
    no = pl.Series([False])
    tied = pl.concat([no, same]) | pl.concat([same, no])
    tied_rows = first.filter(tied)
    # built from the key columns alone: a ``select`` on a frame of many chunks would first
    # copy every column of it into one chunk
    subset = pl.DataFrame([frame.get_column(k).gather(tied_rows) for k in keys])
    within = subset.select(pl.arg_sort_by(keys, descending=descending, nulls_last=True, maintain_order=True)).to_series()
    return first.scatter(tied.arg_true(), tied_rows.gather(within))


def schema_markdown(tables: Sequence[TableSchema] = TABLES) -> str:
    """docs/schema.md's table reference, generated from this module."""
    parts = [t.describe_markdown() for t in tables]
    return "\n".join(parts)
