"""PyTorch profiler (Kineto) Chrome traces → canonical tables.

Reads every vintage PyTorch has written since 1.8: the capitalised categories of 1.8–1.11
(``Operator``, ``Runtime``, ``Kernel``, flow ``async``/``async_gpu``, ``computeProperties``),
the activity-type categories of 1.12+ (``cpu_op``, ``cuda_runtime``, ``kernel``, ``ac2g``
flows...), ``cuda_sync`` rows (2.1+), ``baseTimeNanoseconds`` and ns-fraction timestamps
(2.4+), ``distributedInfo``, ROCm (``hip*`` calls, string stream args), Triton
(``cuLaunchKernel``), CUDA-graph launches (one correlation, many kernels), ``[memory]``
instants, counters (``ph: C``), string pids/tids and integers above int64.

How it stays fast and small: the traceEvents array is streamed in chunks of whole events
(:mod:`._jsonarray`).  Each chunk is scanned by the native scanner (``_kineto_scan.c``,
when it was built) straight into typed columns for the fields tracekit uses; an event it
does not model exactly is decoded by msgspec, and without the scanner (or with
``TRACEKIT_PURE_PYTHON=1``) msgspec decodes every chunk into typed structs that keep only
those fields, turned into the same columns once.  Each chunk is
then cut by destination table (:class:`_Parts`: timed events already in canonical
columns, flow endpoints, metadata, memory instants), so the wide per-event frame never
exists for the whole trace; what needs the whole trace (string-id numbering, the main
process, flow binding, launch links) is polars expressions at the end.  A chunk that
msgspec refuses (NaN literals, a wrongly typed field) goes through a tolerant slow path
that keeps every event it can.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any, Union

import msgspec
import polars as pl

from tracekit.errors import TraceCorruptError, TraceFormatError
from tracekit.native import ArrowCapsules, load, release_free_heap
from tracekit.schema import (
    COUNTERS,
    DEVICES,
    EVENT_KIND,
    FLOW_KIND,
    FLOWS,
    GPU_KINDS,
    LAUNCH_KINDS,
    LINK_SOURCE,
    LINKS,
    MEMCPY_KIND,
    MEMORY,
    MEMORY_KIND,
    SYNC_KIND,
    THREADS,
    EventKind,
    FlowKind,
    TraceInfo,
    TraceTables,
    canonical_order,
    finalize_events,
    repeated,
)

from ._jsonarray import ArrayStream, NotATraceArray, iter_event_chunks, iter_whole_chunks
from ._source import Prefetch, ProgressSink, ReadAhead, check_path, open_stream, open_whole

Num = Union[int, float, str, None]  # noqa: UP007 - msgspec needs a runtime union


class _Event(msgspec.Struct, gc=False):
    """The fields every event needs; ``args`` stays undecoded until its group is known."""

    ph: Num = None
    cat: Num = None
    name: Num = None
    pid: Num = None
    tid: Num = None
    ts: Num = None
    dur: Num = None
    id: Num = None
    args: msgspec.Raw = msgspec.Raw(b"{}")


class _Dim3(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A CUDA dim3 written as ``[x, y, z]``."""

    x: int = 0
    y: int = 1
    z: int = 1


_NO_DIM = _Dim3(0, 0, 0)


class _CollectiveArgs(msgspec.Struct, gc=False):
    """The collective's args, written both on its kernel (GPU side) and on its
    ``record_param_comms`` operator (CPU side)."""

    collective: Num = msgspec.field(default=None, name="Collective name")
    pg_name: Num = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Process Group Ranks")
    group_size: Num = msgspec.field(default=None, name="Group size")
    coll_seq: Num = msgspec.field(default=None, name="Seq")
    coll_seq_v2: Num = msgspec.field(default=None, name="seq")
    msg_elems: Num = msgspec.field(default=None, name="In msg nelems")


class _GpuArgs(_CollectiveArgs, gc=False):
    """Args of kernels, copies, memsets and sync rows."""

    external_id: Num = msgspec.field(default=None, name="External id")
    external_id_v1: Num = msgspec.field(default=None, name="external id")
    correlation: Num = None
    stream: Num = None
    device: Num = None
    bytes: Num = None
    kind_arg: Num = msgspec.field(default=None, name="kind")
    grid: _Dim3 = _NO_DIM
    block: _Dim3 = _NO_DIM
    registers: Num = msgspec.field(default=None, name="registers per thread")
    shared_memory: Num = msgspec.field(default=None, name="shared memory")
    occupancy: Num = msgspec.field(default=None, name="est. achieved occupancy %")
    sync_kind: Num = msgspec.field(default=None, name="cuda_sync_kind")
    wait_on_stream: Num = None
    wait_corr: Num = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")


class _LaunchArgs(msgspec.Struct, gc=False):
    """Args of runtime/driver calls."""

    external_id: Num = msgspec.field(default=None, name="External id")
    external_id_v1: Num = msgspec.field(default=None, name="external id")
    correlation: Num = None


class _OpArgs(_CollectiveArgs, gc=False):
    """Args of CPU operators and annotations."""

    external_id: Num = msgspec.field(default=None, name="External id")
    external_id_v1: Num = msgspec.field(default=None, name="external id")
    sequence_nr: Num = msgspec.field(default=None, name="Sequence number")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")


class _PyArgs(msgspec.Struct, gc=False):
    """Args of Python frames."""

    python_id: Num = msgspec.field(default=None, name="Python id")
    python_parent_id: Num = msgspec.field(default=None, name="Python parent id")


class _MemArgs(msgspec.Struct, gc=False):
    """Args of ``[memory]`` instants."""

    mem_device_type: Num = msgspec.field(default=None, name="Device Type")
    mem_device_id: Num = msgspec.field(default=None, name="Device Id")
    mem_addr: Num = msgspec.field(default=None, name="Addr")
    mem_bytes: Num = msgspec.field(default=None, name="Bytes")
    mem_total_allocated: Num = msgspec.field(default=None, name="Total Allocated")
    mem_total_reserved: Num = msgspec.field(default=None, name="Total Reserved")


class _MetaArgs(msgspec.Struct, gc=False):
    """Args of ``ph: M`` metadata (process_name, thread_name)."""

    label: Num = msgspec.field(default=None, name="name")


_DECODER = msgspec.json.Decoder(list[_Event])
#: arg group → (decoder, fields)
_ARG_GROUPS: dict[str, tuple[msgspec.json.Decoder[Any], tuple[str, ...]]] = {
    name: (msgspec.json.Decoder(list[cls]), tuple(cls.__struct_fields__))  # type: ignore[valid-type]
    for name, cls in (
        ("gpu", _GpuArgs),
        ("launch", _LaunchArgs),
        ("op", _OpArgs),
        ("py", _PyArgs),
        ("mem", _MemArgs),
        ("meta", _MetaArgs),
    )
}
#: lower-cased category → arg group
_CATEGORY_GROUP = {
    **dict.fromkeys(
        ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "cuda_sync", "xpu_sync", "mtia_ccp_events"), "gpu"
    ),
    **dict.fromkeys(
        ("cuda_runtime", "runtime", "cuda_driver", "mtia_runtime", "xpu_runtime", "xpu_driver",
         "privateuse1_runtime", "privateuse1_driver", "glow_runtime"),
        "launch",
    ),
    **dict.fromkeys(("cpu_op", "operator", "user_annotation", "gpu_user_annotation"), "op"),
    "python_function": "py",
}

_BASE_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id")
_INT_ARGS = frozenset(
    (
        "external_id", "external_id_v1", "correlation", "device", "bytes", "registers", "shared_memory",
        "wait_on_stream", "wait_corr", "sequence_nr", "python_id", "python_parent_id", "mem_device_type",
        "mem_device_id", "mem_addr", "mem_bytes", "mem_total_allocated", "mem_total_reserved", "stream",
        "group_size", "coll_seq", "coll_seq_v2", "msg_elems",
    )
)
_STR_ARGS = frozenset(("kind_arg", "sync_kind", "collective", "label", "pg_name"))
#: every raw arg column, with its dtype (so chunks without a group still have the column)
_ARG_DTYPES: dict[str, pl.DataType] = {}
for _decoder, _fields in _ARG_GROUPS.values():
    for _f in _fields:
        if _f in _INT_ARGS or _f in ("grid", "block"):
            _ARG_DTYPES[_f] = pl.Int64()
        elif _f == "occupancy":
            _ARG_DTYPES[_f] = pl.Float64()
        else:
            _ARG_DTYPES[_f] = pl.String()

#: the columns of a decoded chunk, in order (:func:`_columns` and the native scanner)
_RAW_COLUMNS = [
    "ph", "cat", "name", "pid", "pid_label", "tid", "tid_label", "ts", "dur", "id", "id_label", *_ARG_DTYPES,
]

#: category (lower-cased) → canonical kind
_CATEGORY_KIND: dict[str, EventKind] = {
    "cpu_op": EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.ANNOTATION,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "python_function": EventKind.PYTHON,
    "cuda_runtime": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME,
    "mtia_runtime": EventKind.RUNTIME,
    "xpu_runtime": EventKind.RUNTIME,
    "privateuse1_runtime": EventKind.RUNTIME,
    "glow_runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "xpu_driver": EventKind.DRIVER,
    "privateuse1_driver": EventKind.DRIVER,
    "kernel": EventKind.KERNEL,
    "mtia_ccp_events": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "memset": EventKind.MEMSET,
    "cuda_sync": EventKind.SYNC,
    "xpu_sync": EventKind.SYNC,
    "cpu_instant_event": EventKind.INSTANT,
    "overhead": EventKind.OVERHEAD,
}
_KIND_OF_CATEGORY = {c: k.value for c, k in _CATEGORY_KIND.items()}
#: the known categories as an enum, and the kind of each (by the enum's index)
_KNOWN_CATEGORIES = pl.Enum(list(_KIND_OF_CATEGORY))
_CATEGORY_KINDS = pl.Series("kind", list(_KIND_OF_CATEGORY.values()), dtype=EVENT_KIND)
#: the categories of today's traces (the known ones, the flows', a few without a kind), and
#: each one's kind: a chunk with these alone is coded by one enum cast
_COMMON_CATEGORIES = pl.Enum([*_KIND_OF_CATEGORY, "ac2g", "fwdbwd", "async", "async_gpu", "async_cpu_to_gpu"])
_COMMON_CATEGORY_KINDS = pl.Series(
    "kind", [_KIND_OF_CATEGORY.get(c) for c in _COMMON_CATEGORIES.categories], dtype=EVENT_KIND
)
#: the common categories the native scanner codes (``scan(..., categories)``: each row's
#: category as its position among them, what the enum cast gives)
_COMMON_CATEGORY_NAMES = tuple(_COMMON_CATEGORIES.categories.to_list())
_FLOW_CATEGORY: dict[str, str] = {
    "ac2g": "launch",
    "async": "launch",
    "async_gpu": "launch",
    "async_cpu_to_gpu": "launch",
    "fwdbwd": "fwdbwd",
}
_SYNC_NAMES = {
    "stream sync": "stream_sync",
    "context sync": "context_sync",
    "event sync": "event_sync",
    "stream wait event": "stream_wait_event",
}
#: raw columns the events table is built from, besides the order, start, kind and ``_complete``
#: (everything else is dropped early; ``ph`` and ``cat`` have given the kind)
_EVENT_SOURCE_COLUMNS = [
    "dur", "name", "pid", "tid", "tid_label", "device", "stream", "correlation",
    "external_id", "external_id_v1", "bytes", "kind_arg", "grid", "block", "registers", "shared_memory", "occupancy",
    "sync_kind", "wait_on_stream", "wait_corr", "sequence_nr", "python_id", "python_parent_id", "input_dims", "collective",
    "input_types", "concrete_inputs", "pg_name", "pg_ranks", "group_size", "coll_seq", "coll_seq_v2", "msg_elems",
]
#: raw columns of a flow endpoint (``cat`` becomes ``_cat``, lower-cased)
_FLOW_SOURCE_COLUMNS = ["ph", "cat", "id", "id_label", "pid", "tid", "start_ns"]
#: raw columns a timed part is cut with even when null on every row of the chunk
_TIMED_SOURCES = frozenset(("dur", "name", "pid", "tid"))
#: raw columns of a ``[memory]`` instant, besides its start
_MEMORY_SOURCE_COLUMNS = [
    "pid", "tid", "mem_device_type", "mem_device_id", "mem_addr", "mem_bytes", "mem_total_allocated",
    "mem_total_reserved",
]
#: timed-part columns kept even when null on every row of a chunk (the whole-trace steps read them)
_TIMED_KEPT = frozenset(("_order", "kind", "name", "pid", "tid", "start_ns", "dur_ns"))
_LINK_TARGETS = [k.value for k in (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.SYNC)]


#: the events array is decoded in chunks of about this many bytes of JSON: small chunks keep a
#: small trace's peak memory low, large ones spread the per-chunk polars work over more events
SMALL_CHUNK_BYTES = 4 * 1024 * 1024
LARGE_CHUNK_BYTES = 16 * 1024 * 1024
#: files at least this large on disk are read in large chunks
LARGE_FILE_BYTES = 64 * 1024 * 1024


#: the least size of the first chunk, which is what the first read-ahead block brought: small,
#: so that its rows reach the caller's thread after the gunzip and scan of a few hundred kB
#: instead of half a chunk.  The first chunk's polars work costs several times a later one's in
#: a fresh process (polars' code and caches are touched for the first time, whatever the rows);
#: with a small first chunk that cost overlaps with the reading and scanning of the second
#: chunk instead of following them (docs/performance.md)
FIRST_CHUNK_BYTES = 64 * 1024
#: what the first read-ahead block holds beyond the first chunk's least size: room for the
#: header before the events (the first chunk takes whatever of the block the header leaves)
_FIRST_BLOCK_MARGIN = 256 * 1024


#: what the reader's producer thread hands over for a chunk: its frame (or what builds it on
#: the caller's thread), its counter events, and its categories coded by the scanner or None
_Decoded = tuple[pl.DataFrame | Callable[[], pl.DataFrame | None], list[dict[str, Any]], pl.Series | None]


def default_chunk_bytes(file_bytes: int) -> int:
    """The chunk size for a file of ``file_bytes`` on disk.  Measured (docs/performance.md,
    Kineto section): 16 MB chunks take about 15 % less CPU than 4 MB on a 299 MB trace at the
    same peak RSS, but raise the peak of a 26-54 MB trace by 50-90 MB, a third of its whole."""
    return LARGE_CHUNK_BYTES if file_bytes >= LARGE_FILE_BYTES else SMALL_CHUNK_BYTES


def read_kineto(path: str | Path, *, chunk_bytes: int | None = None, progress: ProgressSink | None = None) -> TraceTables:
    """Parse a Kineto Chrome trace (``.json`` or ``.json.gz``) into canonical tables.

    ``progress`` hears the bytes read from the file (phase ``reading``), then ``decoding``.
    ``chunk_bytes``: the decoding chunk size (default: :func:`default_chunk_bytes` of the
    file's size); the tables do not depend on it.
    """
    p = check_path(path)
    if chunk_bytes is None:
        chunk_bytes = default_chunk_bytes(p.stat().st_size)
    if progress is not None:
        progress.phase("reading", total=p.stat().st_size)
    state = ArrayStream()
    warnings: list[str] = []
    parts = _Parts()
    counter_rows: list[dict[str, Any]] = []
    dropped = [0]

    native = native_scanner()
    # this parse's freed column memory, reused by the next chunks' columns (_kineto_scan.c)
    pool = native.Pool() if native is not None else None

    def decode(chunk: bytes | memoryview) -> _Decoded:
        # no side effects here: the salvage search may decode a chunk and discard it
        scanned = _scan(native, chunk, pool, _COMMON_CATEGORY_NAMES) if native is not None else None
        if scanned is not None and not scanned[2]:
            # every event scanned: the frame is built from the scanner's columns (and fixed)
            # by the caller's thread, which waits on this one, the pipeline's slowest stage;
            # here only the ``ph`` column, to look for counter events, and the categories'
            # codes (:meth:`_Parts.add`), when the scanner could give them
            rows, columns, _, codes = scanned
            at = next(i for i, column in enumerate(columns) if column[0] == "ph")
            name, kind, nfloat, nlabels, values, labels = columns[at]
            if values is None:  # no event of the chunk has a ph (the scanner left the column out)
                counters = []
            else:
                ph = pl.Series(values)
                columns = [*columns[:at], (name, kind, nfloat, nlabels, ph, labels), *columns[at + 1 :]]
                counters = _counter_events(bytes(chunk)) if (ph == "C").any() else []
            return partial(_scanned_frame, (rows, columns, ()), None), counters, None if codes is None else pl.Series(codes)
        frame = _scanned_frame(scanned[:3], chunk) if scanned is not None else None
        if frame is None:  # not scanned natively (unusual content, invalid JSON): msgspec
            frame = _columns(_decode_chunk(chunk, dropped), dropped)
        counters = _counter_events(bytes(chunk)) if frame.height and (frame["ph"] == "C").any() else []
        return frame, counters, None

    def scanned() -> Iterator[_Decoded]:
        # the first block is what the chunker's small first chunk needs (with room for the
        # trace's header), so that the first rows reach this thread after the gunzip and scan
        # of that block instead of half a chunk
        block = min(chunk_bytes, 8 * 1024 * 1024)
        first_chunk = min(FIRST_CHUNK_BYTES, chunk_bytes // 2)
        first = min(block, first_chunk + _FIRST_BLOCK_MARGIN)
        # the whole content in one buffer where it can be (a plain file mapped, a small or
        # medium gzip decompressed whole by libdeflate): chunks cut in place, nothing copied
        whole = open_whole(p, progress=progress, head=first)
        if whole is not None:
            with whole:
                yield from iter_whole_chunks(
                    whole, lambda: ReadAhead(open_stream(p, progress=progress), block=block), state, decode,
                    chunk_bytes=chunk_bytes, first_bytes=first_chunk,
                )
            return
        with ReadAhead(open_stream(p, progress=progress), block=block, first=first) as stream:
            yield from iter_event_chunks(
                stream, state, decode, chunk_bytes=chunk_bytes, first_bytes=first_chunk  # type: ignore[arg-type]
            )

    try:
        # three threads: the reader (file, gunzip), the chunker and scanner (Prefetch), and
        # this one cutting each scanned chunk by table; chunks arrive in file order
        with Prefetch(scanned) as chunks:
            for item, counters, codes in chunks:
                frame = item if isinstance(item, pl.DataFrame) else item()
                assert frame is not None  # (a chunk without fallback events always has a frame)
                parts.add(frame, codes)
                del item, codes
                counter_rows.extend(counters)
                del frame
        # the scans are done: what the pool keeps free goes back to the system (blocks still
        # held by columns are unmapped when polars releases them)
        pool = None
    except NotATraceArray as exc:
        raise _explain_not_a_trace(p, exc.head) from None
    except OSError as exc:
        raise TraceCorruptError(f"cannot read the file ({exc})", path=p) from exc

    if progress is not None:
        progress.phase("decoding")
    top = _decode_top_level(state, warnings)
    if state.truncated:
        if parts.rows == 0:
            if state.total_bytes == 0:
                raise TraceCorruptError("the file holds no readable data (" + state.truncation_reason + ")", path=p)
            raise TraceCorruptError(
                f"the trace is truncated before its first complete event ({state.truncation_reason})", path=p
            )
        warnings.append(
            f"truncated trace: {state.truncation_reason}; kept every complete event, "
            f"dropped the last {state.lost_bytes:,} bytes (an incomplete event) of {state.total_bytes:,}"
        )
    if state.damaged_bytes:
        warnings.append(
            f"damaged trace: {state.damaged_bytes:,} bytes inside the events array could not be decoded and were "
            "skipped (the events around them were kept)"
        )
    if dropped[0]:
        warnings.append(f"skipped {dropped[0]:,} malformed events (wrong field types)")
    return _build_tables(p, parts, top, counter_rows, warnings, truncated=state.truncated)


# --------------------------------------------------------------------------- decoding


def native_scanner() -> Any:
    """The native chunk scanner, or None when it was not built or ``TRACEKIT_PURE_PYTHON=1``."""
    return load("kineto_scan")


# column kinds of the native scanner (the K_* enum of _kineto_scan.c); _K_TIME_NS: a time
# column of integers the scanner already multiplied into nanoseconds (no fix here)
_K_STR, _K_INT, _K_TIME, _K_FLOAT, _K_DIM, _K_RAW, _K_RANKS, _K_TIME_NS = range(8)
_BASE_ID = ("pid", "tid", "id")
# the type of a scanned column by kind, for the columns the scanner leaves out when a chunk has
# no value for them (text as strings; times, as integers, are floats only once a float came)
_SCAN_NULL_TYPE: dict[int, pl.DataType] = {
    _K_STR: pl.String(), _K_INT: pl.Int64(), _K_TIME: pl.Int64(), _K_FLOAT: pl.Float64(),
    _K_DIM: pl.Int64(), _K_RAW: pl.String(), _K_RANKS: pl.String(), _K_TIME_NS: pl.Int64(),
}


def _scan_columns(native: Any, chunk: bytes | memoryview) -> pl.DataFrame | None:
    """One chunk through the native scanner, as the frame :func:`_columns` would give;
    None when the scanner left the chunk to the msgspec path.  Raises ValueError when the
    chunk is certainly not JSON (what the msgspec path and Python's json would both say)."""
    scanned = _scan(native, chunk)
    return None if scanned is None else _scanned_frame(scanned, chunk)


def _scan(native: Any, chunk: bytes | memoryview, pool: Any = None, categories: tuple[str, ...] | None = None) -> Any:
    """The native scanner's columns of one chunk (rows, columns, fallback events); None when
    it left the chunk to the msgspec path; ValueError when the chunk is certainly not JSON.
    ``pool``: the parse's ``Pool`` of freed column memory, or None.  ``categories``: then
    the result has a fourth item, each row's category coded by its position among them (a
    column, which :meth:`_Parts.add` takes), or None where some row's is none of them."""
    scanned = native.scan(chunk, pool, categories)
    if scanned is False:
        raise ValueError("not valid JSON")
    return scanned


def _scanned_frame(scanned: Any, chunk: bytes | memoryview | None) -> pl.DataFrame | None:
    """The frame of :func:`_scan`'s columns (``chunk``, the scanned bytes, is read only for
    the fallback events, and may be None when there are none); None when the chunk must
    take the msgspec path after all.  A column may already be a Series."""
    rows, columns, fallback = scanned
    extra: pl.DataFrame | None = None
    float_times: set[str] = set()
    if fallback:  # events the scanner did not decode exactly: msgspec decodes just those
        native_floats = {name for name, kind, nfloat, *_ in columns if kind == _K_TIME and nfloat}
        assert chunk is not None
        extra, float_times = _fallback_events(chunk, fallback, native_floats)
        if extra is None:
            return None
    series: dict[str, pl.Series] = {}  # by name: the frame is built in _RAW_COLUMNS' order
    temporary: list[pl.Series] = []  # label texts of argument ids, dropped after the fixes
    #: the fixed columns' expressions, by name (every other column is taken as it is)
    fixes: dict[str, pl.Expr] = {}
    nulls: dict[pl.DataType, pl.Series] = {}

    def all_null(dtype: pl.DataType) -> pl.Series:  # one all-null series per type, shared
        if dtype not in nulls:
            # (one null repeated by a native call: ``pl.repeat`` is a query of its own, which
            # costs tens of times as much, and a chunk has about twenty such columns)
            nulls[dtype] = repeated("", None, dtype, rows)
        return nulls[dtype]

    for name, kind, nfloat, nlabels, values, labels in columns:
        if values is None:  # no value in this chunk
            series[name] = all_null(_SCAN_NULL_TYPE[kind]).alias(name)
        else:  # the scanner's buffers, through the Arrow PyCapsule interface (no copy), or a
            # column the prefetch thread already wrapped
            series[name] = (values if isinstance(values, pl.Series) else pl.Series(values)).alias(name)
        if labels is not None:
            label_text = pl.Series(labels).alias(name + "_label")
            if name in _BASE_ID:
                series[label_text.name] = label_text
            else:
                temporary.append(label_text)
        elif name in _BASE_ID:
            series[name + "_label"] = all_null(pl.String()).alias(name + "_label")
        if not (nlabels or (values is not None and kind in (_K_RANKS, _K_TIME))):
            continue  # (no fix: most columns; an expression costs µs to build)
        col = pl.col(name)
        # (a column the scanner left out, all null, stays all null: no fix; the fallback
        # events' own values come through the msgspec path)
        if kind == _K_RANKS and values is not None:  # _rank_list_text: compact list text, else null
            compact = col.str.replace_all(" ", "", literal=True)
            fixes[name] = pl.when(compact.str.starts_with("[") & compact.str.ends_with("]")).then(compact)
        elif kind == _K_TIME and values is not None:
            # _time_series: one float in the chunk sends every value through float64 (the
            # scanner gave float64 then; a float among the fallback events needs a cast).
            # (Integers alone came as _K_TIME_NS, already in nanoseconds, unless the chunk
            # has fallback events: then they are microseconds here.)
            fixes[name] = _us_to_ns(col.cast(pl.Float64)) if nfloat or name in float_times else col * 1000
        elif kind == _K_INT and nlabels:
            text = pl.col(name + "_label")
            if name in _BASE_ID:  # _id_series: numeric strings are ids, other strings labels
                ints = col.fill_null(text.str.strip_chars().cast(pl.Int64, strict=False))
                fixes[name] = ints
                fixes[name + "_label"] = pl.when(ints.is_null()).then(text)
            else:  # _int_series: numeric strings (and integral floats in them) → ints
                stripped = text.str.strip_chars()
                as_float = stripped.cast(pl.Float64, strict=False)
                from_float = pl.when(as_float.is_finite() & (as_float.abs() < 2.0**63)).then(as_float).cast(pl.Int64)
                fixes[name] = col.fill_null(stripped.cast(pl.Int64, strict=False)).fill_null(from_float)
    frame = pl.DataFrame([series[name] for name in _RAW_COLUMNS] + temporary)
    del series, temporary, columns
    if fixes or len(frame.columns) > len(_RAW_COLUMNS):
        # the fixes and the column order (the argument ids' label texts left out) in one select
        frame = frame.select(fixes[c].alias(c) if c in fixes else pl.col(c) for c in _RAW_COLUMNS)
    if extra is not None:
        return _merge_fallback(frame, extra, rows, fallback)
    return frame


def _fallback_events(
    chunk: bytes | memoryview, fallback: Sequence[tuple[int, int, int]], native_floats: set[str]
) -> tuple[pl.DataFrame | None, set[str]]:
    """The raw frame of the events the scanner left out, decoded by msgspec, and the time
    columns that hold a float there.  (None, ...) when the whole chunk must take the msgspec
    path: when msgspec refuses these events, the old path decodes the whole chunk with its
    tolerant decoder, and only the whole chunk gives the same result then."""
    view = memoryview(chunk)
    payload = b"[" + b",".join(bytes(view[start:end]) for start, end, _ in fallback) + b"]"
    try:
        events: list[_Event] = _DECODER.decode(payload)
    except (msgspec.DecodeError, RecursionError):  # (msgspec's own depth limit: nesting past it)
        return None, set()
    float_times = {f for f in ("ts", "dur") if any(not isinstance(getattr(e, f), (int, type(None))) for e in events)}
    dropped = [0]
    frame = _columns(events, dropped)
    if dropped[0]:
        return None, set()
    # a float among the native rows sends these events' times through float64 too
    redo = native_floats - float_times
    if redo:
        frame = frame.with_columns(_float_time_series(f, [getattr(e, f) for e in events]) for f in sorted(redo))
    return frame, float_times


def _merge_fallback(
    native: pl.DataFrame, extra: pl.DataFrame, rows: int, fallback: Sequence[tuple[int, int, int]]
) -> pl.DataFrame:
    """Native rows and fallback rows back in the chunk's event order."""
    index = pl.Series("_i", [i for _, _, i in fallback], dtype=pl.Int64)
    native_index = pl.int_range(rows + len(fallback), dtype=pl.Int64, eager=True).alias("_i")
    native_index = native_index.filter(~native_index.is_in(index.implode()))
    merged = pl.concat(
        [native.with_columns(native_index), extra.with_columns(index)], how="vertical_relaxed"
    ).sort("_i")
    return merged.drop("_i")


def _decode_chunk(chunk: bytes | memoryview, dropped: list[int]) -> list[_Event]:
    """Decode one ``[ev,...]`` chunk; raise ValueError if it is not valid JSON at all."""
    try:
        events: list[_Event] = _DECODER.decode(chunk)
    # DecodeError includes ValidationError (a wrongly typed field); RecursionError is a value
    # nested deeper than msgspec goes, which the tolerant path refuses as well (the salvage
    # search then keeps the events around it)
    except (msgspec.DecodeError, RecursionError):
        events = _tolerant_decode(bytes(chunk), dropped)
    return events


def _tolerant_decode(chunk: bytes, dropped: list[int]) -> list[_Event]:
    """Slow path: Python's json (accepts NaN/Infinity), then event-by-event conversion."""
    try:
        items = json.loads(chunk)
    except (ValueError, RecursionError) as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(items, list):
        raise ValueError("not an array")
    out: list[_Event] = []
    for item in items:
        if not isinstance(item, dict):
            dropped[0] += 1
            continue
        args = item.pop("args", None)
        fields = {k: v for k, v in item.items() if k in _BASE_FIELDS}
        fields = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in fields.items()}
        try:
            ev = msgspec.convert(fields, _Event, strict=False)
        except (msgspec.ValidationError, TypeError, ValueError, RecursionError):
            dropped[0] += 1
            continue
        if isinstance(args, dict):
            try:
                ev.args = msgspec.Raw(json.dumps(args, allow_nan=False, default=str).encode())
            except (ValueError, RecursionError):
                clean = {k: v for k, v in args.items() if not (isinstance(v, float) and not math.isfinite(v))}
                try:
                    ev.args = msgspec.Raw(json.dumps(clean, default=str).encode())
                except (ValueError, RecursionError):
                    ev.args = msgspec.Raw(b"{}")
        out.append(ev)
    return out


def _decode_args(decoder: msgspec.json.Decoder[Any], raws: list[msgspec.Raw], dropped: list[int]) -> list[Any]:
    """Decode a group's args objects in one call; fall back object by object if one is bad."""
    payload = b"[" + b",".join(raws) + b"]"
    try:
        return list(decoder.decode(payload))
    except msgspec.DecodeError:
        pass
    out = []
    empty = decoder.decode(b"[{}]")[0]
    for raw in raws:
        try:
            out.append(decoder.decode(b"[" + bytes(raw) + b"]")[0])
        except msgspec.DecodeError:
            try:
                value = json.loads(bytes(raw))
                clean = {k: v for k, v in value.items() if not (isinstance(v, float) and not math.isfinite(v))} if isinstance(value, dict) else {}
                out.append(decoder.decode(b"[" + json.dumps(clean, default=str).encode() + b"]")[0])
            except (ValueError, RecursionError, msgspec.DecodeError):
                dropped[0] += 1
                out.append(empty)
    return out


def _counter_events(chunk: bytes) -> list[dict[str, Any]]:
    try:
        items = json.loads(chunk)
    except (ValueError, RecursionError):
        return []
    rows = []
    for item in items:
        if not isinstance(item, dict) or item.get("ph") != "C" or not isinstance(item.get("args"), dict):
            continue
        for series, value in item["args"].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows.append(
                    {
                        "name": str(item.get("name")),
                        "series": str(series),
                        "pid": item.get("pid"),
                        "ts": item.get("ts"),
                        "value": float(value),
                    }
                )
    return rows


def _columns(events: Sequence[_Event], dropped: list[int] | None = None) -> pl.DataFrame:
    """Turn decoded structs into raw columns.

    Base fields take one pass each over all events; args are decoded per group (GPU
    activity, launches, operators, Python frames, memory instants, metadata), so each
    arg column is built only from the events that can carry it.
    """
    dropped = dropped if dropped is not None else [0]
    data: dict[str, pl.Series] = {}
    for f in _BASE_FIELDS:
        values = list(map(attrgetter(f), events))
        if f in ("ts", "dur"):
            data[f] = _time_series(f, values)
        elif f in ("pid", "tid", "id"):
            data[f], data[f + "_label"] = _id_series(f, values)
        else:
            data[f] = _str_series(f, values)
    base = pl.DataFrame(data)
    if not events:
        return base.with_columns([pl.lit(None, dtype=dt).alias(n) for n, dt in _ARG_DTYPES.items()])
    cats = base["cat"].str.to_lowercase()
    group = cats.replace_strict(_CATEGORY_GROUP, default=None, return_dtype=pl.String)
    ph = base["ph"]
    group = (
        pl.select(
            pl.when(ph == "M").then(pl.lit("meta"))
            .when(ph.is_in(["i", "I"]) & (base["name"] == "[memory]")).then(pl.lit("mem"))
            .when(ph == "X").then(group)
            .otherwise(None)
        )
        .to_series()
    )
    indices = (
        group.to_frame("g").with_row_index("i").drop_nulls("g").group_by("g", maintain_order=True).agg(pl.col("i"))
    )
    raw_args = list(map(attrgetter("args"), events))
    parts = []
    for gname, idx in indices.iter_rows():
        decoder, fields = _ARG_GROUPS[gname]
        decoded = _decode_args(decoder, [raw_args[i] for i in idx], dropped)
        cols: dict[str, pl.Series] = {"_i": pl.Series("_i", idx, dtype=pl.UInt32)}
        for f in fields:
            values = list(map(attrgetter(f), decoded))
            cols[f] = _arg_series(f, values)
        parts.append(pl.DataFrame(cols))
    schema = {"_i": pl.UInt32(), **_ARG_DTYPES}
    args = pl.concat([pl.DataFrame(schema=schema), *parts], how="diagonal_relaxed") if parts else pl.DataFrame(schema=schema)
    return base.with_row_index("_i").join(args, on="_i", how="left", maintain_order="left").drop("_i")


def _arg_series(f: str, values: list[Any]) -> pl.Series:
    if f in _INT_ARGS:
        return _int_series(f, values)
    if f in _STR_ARGS:
        return _str_series(f, values)
    if f == "occupancy":
        return pl.Series(f, [v if isinstance(v, (int, float)) else None for v in values], dtype=pl.Float64, strict=False)
    if f in ("grid", "block"):
        dims = [pl.Series(list(map(attrgetter(axis), values)), dtype=pl.Int64) for axis in ("x", "y", "z")]
        total = dims[0] * dims[1] * dims[2]
        return pl.select(pl.when(pl.lit(total) > 0).then(pl.lit(total)).otherwise(None)).to_series().alias(f)
    if f in ("input_dims", "input_types", "concrete_inputs"):
        return pl.Series(f, [bytes(v).decode("utf-8", "replace") if v else None for v in values], dtype=pl.String)
    if f == "pg_ranks":
        return pl.Series(f, [_rank_list_text(bytes(v)) if v else None for v in values], dtype=pl.String)
    return _str_series(f, values)


def _rank_list_text(raw: bytes) -> str | None:
    """``Process Group Ranks`` as compact JSON list text (``[0,1]``): PyTorch writes the list
    as a string (``"[0, 1]"``), other writers as a JSON array."""
    text = raw.decode("utf-8", "replace").strip()
    if text.startswith('"'):
        try:
            text = str(msgspec.json.decode(raw))
        except msgspec.DecodeError:
            return None
    text = text.replace(" ", "")
    return text if text.startswith("[") and text.endswith("]") else None


def _str_series(name: str, values: list[Any]) -> pl.Series:
    try:
        return pl.Series(name, values, dtype=pl.String)
    except (TypeError, ValueError, OverflowError):
        return pl.Series(name, values, dtype=pl.String, strict=False)


def _int_series(name: str, values: list[Any]) -> pl.Series:
    """Integers; numeric strings and integral floats are converted, anything else is null."""
    try:
        return pl.Series(name, values, dtype=pl.Int64)
    except (TypeError, ValueError, OverflowError):
        pass
    text = pl.Series(name, values, dtype=pl.String, strict=False).str.strip_chars()
    as_int = text.cast(pl.Int64, strict=False)
    as_float = text.cast(pl.Float64, strict=False)
    in_range = as_float.is_finite() & (as_float.abs() < 2.0**63)
    from_float = pl.select(pl.when(pl.lit(in_range)).then(pl.lit(as_float)).otherwise(None).cast(pl.Int64)).to_series()
    result: pl.Series = as_int.fill_null(from_float).alias(name)
    return result


def _as_int(v: Any) -> int | None:
    """One value → int64 or None (used for top-level metadata, not per event)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else None
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and abs(v) < 2**63 else None
    if isinstance(v, str):
        try:
            n = int(v.strip(), 0)
        except ValueError:
            try:
                f = float(v)
            except ValueError:
                return None
            return int(f) if math.isfinite(f) and abs(f) < 2**63 else None
        return n if -(2**63) <= n < 2**63 else None
    return None


def _id_series(name: str, values: list[Any]) -> tuple[pl.Series, pl.Series]:
    """pid/tid/id: ints, or strings ("Spans", "stream 7", "24572"); returns (ints, labels).

    Numeric strings become ints; other strings stay as labels (mapped to synthetic ids later).
    """
    try:
        return pl.Series(name, values, dtype=pl.Int64), pl.Series(name + "_label", [None] * len(values), dtype=pl.String)
    except (TypeError, ValueError, OverflowError):
        pass
    text = pl.Series(name, values, dtype=pl.String, strict=False)
    ints = text.str.strip_chars().cast(pl.Int64, strict=False)
    labels = pl.select(pl.when(pl.lit(ints).is_null()).then(pl.lit(text)).otherwise(None)).to_series()
    return ints.alias(name), labels.alias(name + "_label")


def _time_series(name: str, values: list[Any]) -> pl.Series:
    """µs timestamps (int, float with ns fraction, or numeric string) → integer ns."""
    try:
        return pl.Series(name, values, dtype=pl.Int64) * 1000
    except (TypeError, ValueError, OverflowError):
        pass
    return _float_time_series(name, values)


def _float_time_series(name: str, values: list[Any]) -> pl.Series:
    """The float64 branch of :func:`_time_series` (a chunk with a float time in it)."""
    try:
        floats = pl.Series(name, values, dtype=pl.Float64)
    except (TypeError, ValueError, OverflowError):
        floats = pl.Series(name, values, dtype=pl.Float64, strict=False)
    return pl.select(_us_to_ns(pl.lit(floats))).to_series().alias(name)


def _us_to_ns(us: pl.Expr) -> pl.Expr:
    """Float µs → int ns, exact for the 3-decimal values Kineto writes; non-finite → null."""
    finite = us.is_finite() & (us.abs() < 9.2e15)
    whole = us.floor()
    ns = whole.cast(pl.Int64, strict=False) * 1000 + ((us - whole) * 1000).round().cast(pl.Int64, strict=False)
    return pl.when(finite).then(ns).otherwise(None)


# --------------------------------------------------------------------------- top level


def _decode_top_level(state: ArrayStream, warnings: list[str]) -> dict[str, Any]:
    """Decode the metadata before and after the events array (best effort)."""
    top: dict[str, Any] = {}
    if state.bare_array:
        return top
    head = state.header.rstrip()
    if head.endswith(b","):
        head = head[:-1]
    text = head + b"}" if head.strip() != b"{" else b"{}"
    try:
        value = json.loads(text)
        if isinstance(value, dict):
            top.update(value)
    except (ValueError, RecursionError):
        warnings.append("could not decode the metadata before traceEvents; device properties and rank may be missing")
    if state.trailer.strip():
        tail = state.trailer.strip()
        try:
            value = json.loads(b'{"traceEvents":[]' + tail) if tail.startswith(b",") else {}
            if isinstance(value, dict):
                value.pop("traceEvents", None)
                top.update(value)
        except (ValueError, RecursionError):
            warnings.append("could not decode the metadata after traceEvents")
    return top


def _explain_not_a_trace(path: Path, head: bytes) -> TraceFormatError:
    expected = "expected a PyTorch profiler (Kineto) Chrome trace: a JSON object with a traceEvents array"
    text = head.lstrip()[:2000]
    if b'"nodes"' in head and (b'"schema"' in head or b'"finish_ts"' in head):
        return TraceFormatError(
            "this is a Chakra execution trace (it has 'nodes', not 'traceEvents'), not a profiler timeline; " + expected,
            path=path,
            hint="pass the Kineto trace captured alongside it (…_trace.json.gz)",
        )
    if text.startswith(b"{"):
        keys = re.findall(rb'"([A-Za-z_][A-Za-z0-9_ ]{0,40})"\s*:', text)[:6]
        shown = ", ".join(k.decode("ascii", "replace") for k in keys)
        return TraceFormatError(f"JSON object without a traceEvents array (keys: {shown or 'none'}); {expected}", path=path)
    return TraceFormatError(f"not JSON; {expected}", path=path)


# --------------------------------------------------------------------------- tables

#: temporary ids of non-numeric pid/tid labels while chunks arrive; the final ids are
#: given by sorted label once every label is known (so they do not depend on event order)
_TEMP_LABEL_BASE = -(2**62)


class _Parts:
    """The trace cut by destination table, one chunk at a time.

    Each decoded chunk is split as soon as it arrives into the rows of every output: timed
    events already in their canonical columns, flow endpoints, metadata, memory instants.
    The wide raw frame, whose argument columns are mostly null, therefore never exists for
    the whole trace, and peak memory follows the size of the canonical tables.  What needs
    the whole trace (string-id numbering, the main process, base time, rank) is applied
    once at the end, to one or two columns.
    """

    def __init__(self) -> None:
        self.rows = 0
        self.timed: list[pl.DataFrame] = []
        self.flows: list[pl.DataFrame] = []
        self.meta: list[pl.DataFrame] = []
        self.memory: list[pl.DataFrame] = []
        #: per chunk: events per (pid, launches GPU work) for choosing the main process
        self.launchers: list[pl.DataFrame] = []
        #: per chunk: events per unrecognised category
        self.unknown: list[pl.DataFrame] = []
        #: non-numeric pid/tid label → temporary id
        self.labels: dict[str, int] = {}
        #: per chunk: its distinct event names; a timed part's ``name`` is an index into
        #: their concatenation
        self.names: list[pl.Series] = []
        self.name_count = 0
        #: what each memcpy name of the trace says, worked out once
        self.copy_names = _CopyNames()
        #: the timed part's expressions, by the chunk's columns (:func:`_event_columns`)
        self.event_exprs: dict[Any, list[pl.Expr | str]] = {}
        #: each output's expression, by what it was built from (:func:`_event_exprs`)
        self.built_exprs: dict[Any, pl.Expr] = {}

    def add(self, raw: pl.DataFrame, cat_codes: pl.Series | None = None) -> None:
        """Cut one chunk's raw frame.  ``cat_codes``: its rows' categories coded by the native
        scanner (each one of ``_COMMON_CATEGORIES``, by position; null where ``cat`` is), or
        None: then they are coded here."""
        n = raw.height
        start = self.rows
        self.rows += n
        raw = self._number_labels(raw)
        # polars' expression engine costs about 0.1 ms a call plus a few µs a column: the cut
        # below works on Series and takes columns by name, where that gives the same values.
        # Each row's category is coded once, and a timed row's kind gathered by its code: in
        # the usual chunk every category is a common lower-case one and one enum cast codes
        # them; otherwise the chunk's few distinct categories are lower-cased and mapped to
        # kinds, and the rows coded by an enum of them (lower-casing every row's category cost
        # more than the rest of the category work together, and ``replace_strict`` costs
        # 0.3 ms a call even on ten values)
        cat = raw.get_column("cat")
        if cat_codes is not None and cat_codes.len() == n:
            # (what the cast below gives, coded by the scanner as it read the chunk: the cast
            # hashes every row's text, about 6 ms of this thread in a rank0 parse); the codes
            # only index ``code_kinds`` below, so their integer type does not matter
            codes = cat_codes
        else:
            codes = cat.cast(_COMMON_CATEGORIES, strict=False).to_physical()
        traces: list[str] = []
        if codes.null_count() == cat.null_count():
            code_kinds, folded = _COMMON_CATEGORY_KINDS, True
        else:
            # (the few distinct categories by a native value count, lower-cased by Python
            # where they are ASCII, which is polars' lower-casing there too: five queries
            # fewer on a chunk the last chunks of a trace usually are)
            cats = [c for c in cat.value_counts().get_column(cat.name).to_list() if c is not None]
            if all(c.isascii() for c in cats):
                lowered = [c.lower() for c in cats]
            else:
                lowered = pl.Series(cats, dtype=pl.String).str.to_lowercase().to_list()
            code_kinds = pl.Series("kind", [_KIND_OF_CATEGORY.get(c) for c in lowered], dtype=EVENT_KIND)
            folded = lowered == cats
            traces = [c for c, low in zip(cats, lowered, strict=True) if low == "trace"]
            codes = cat.cast(pl.Enum(cats)).to_physical()
        # every destination's rows found in one pass over the narrow columns (plain comparisons:
        # ``is_in`` with a short list costs twice as much); each part then takes its few
        # columns before filtering (an eager filter of the wide raw frame would copy every one of
        # its columns first), and a part with no rows in the chunk filters nothing
        ph = raw.get_column("ph")
        # (null counts of every column at once; ``stamped`` None: every row has a ``ts``)
        nulls = raw.null_count().row(0)
        present = {c for c, k in zip(raw.columns, nulls, strict=True) if k < n}
        stamped = raw.get_column("ts").is_not_null() if nulls[raw.get_column_index("ts")] else None
        instant = (ph == "i") | (ph == "I")
        is_memory = raw.get_column("name") == "[memory]"
        is_complete = ph == "X"
        complete = is_complete
        if traces:  # (an event of a trace's own span is not one of its events)
            complete = complete & ~_any_equal(cat, traces)
        shown = instant & ~is_memory
        if "pid_label" in present:  # (nor are the instants of a profiler's own tracks)
            shown = shown & ~_any_equal(raw.get_column("pid_label"), ["", "Traces", "Spans"])
        # a source column null on every row of the chunk is not cut at all (most argument
        # columns, on most chunks): :func:`_event_columns` leaves out what it would give
        # (the types by name: ``DataFrame.schema`` costs three times as much)
        dtypes = dict(zip(raw.columns, raw.dtypes, strict=True))
        timed_rows = complete | shown if stamped is None else stamped & (complete | shown)
        # each row's kind gathered by its category code (a native gather: ``Series.gather`` and
        # a ``with_columns`` are queries of their own); only a complete event has its
        # category's kind, an instant is an instant.  Worked out for every row of the chunk
        # (narrow native work), so that the timed rows are cut with their kind instead of
        # their ``ph`` and ``cat`` texts (two string columns fewer through the filter)
        kinds = code_kinds[codes].zip_with(is_complete, repeated("kind", EventKind.INSTANT.value, EVENT_KIND, n))
        if kinds.null_count():  # (a timed row of a category without a kind: counted, then ``other``)
            unknown = pl.DataFrame([cat, kinds.alias("kind")]).filter(timed_rows & kinds.is_null())
            if unknown.height:
                self.unknown.append(unknown.group_by("cat").len())
            kinds = kinds.fill_null(EventKind.OTHER.value)
        raw = raw.hstack(
            [
                pl.int_range(start, start + n, dtype=pl.Int64, eager=True).alias("_order"),
                raw.get_column("ts").alias("start_ns"),
                kinds.alias("kind"),
                is_complete.alias("_complete"),
            ]
        )
        self.meta.append(_rows(raw, ph == "M", ["pid", "tid", "name", "label"]))
        flow = (ph == "s") | (ph == "f") | (ph == "t")
        flows = _rows(raw, flow if stamped is None else flow & stamped, _FLOW_SOURCE_COLUMNS)
        flow_cat = flows.get_column("cat")
        if not folded:
            flow_cat = flow_cat.str.to_lowercase()
        if flow_cat.null_count():  # (a fill copies the column even when there is nothing to fill)
            flow_cat = flow_cat.fill_null("")
        self.flows.append(flows.replace_column(1, flow_cat.alias("_cat")))
        memory = _rows(raw, instant & is_memory, ["start_ns", *_MEMORY_SOURCE_COLUMNS])
        if memory.height or not self.memory:
            self.memory.append(_memory_rows(memory))
        # (``dur_ns`` is worked out in :func:`_event_columns`' select, from ``_complete``)
        timed = _rows(
            raw, timed_rows,
            [
                "_order", "start_ns", "kind", "_complete",
                *(c for c in _EVENT_SOURCE_COLUMNS if c in present or c in _TIMED_SOURCES),
            ],
        )
        del raw, ph, stamped, instant, is_memory, complete, is_complete, shown, memory, flow, flows, codes, kinds
        del timed_rows
        # the kinds' masks by comparisons of their codes (a third of an enum's comparison to
        # text; an ``is_in`` in the select cost more than all of them together)
        codes = timed.get_column("kind").to_physical()
        timed = timed.hstack(
            [
                _kind_mask(codes, GPU_KINDS).alias("_on_gpu"),
                _kind_mask(codes, (EventKind.MEMCPY.value,)).alias("_memcpy"),
                _kind_mask(codes, (EventKind.SYNC.value,)).alias("_sync"),
            ]
        )
        # events per (pid, launches GPU work) among the launches and CPU operators, counted
        # by pid for each of the two (a Series' value counts cost a fifth of a two-key
        # group_by) and stacked natively (``pl.concat`` costs ten times as much; the chunks'
        # counts are concatenated once more at the end)
        pids = timed.get_column("pid")
        launched = pids.filter(_kind_mask(codes, LAUNCH_KINDS)).value_counts(name="len")
        operators = pids.filter(_kind_mask(codes, (EventKind.CPU_OP.value,))).value_counts(name="len")
        launch = pl.Series("launch", [True] * launched.height + [False] * operators.height, dtype=pl.Boolean)
        self.launchers.append(launched.vstack(operators).insert_column(1, launch))
        part = _event_columns(
            timed, dtypes, self.copy_names, self.event_exprs, self._name_codes(timed), self.built_exprs
        )
        del timed
        # a column null on every row of the chunk is not kept (most argument columns are, on
        # most chunks: a quarter of the part's memory); the concatenation fills it back with
        # nulls where another chunk has values, and the canonical sort writes a column that
        # no chunk has as nulls, as it does for any all-null column
        nulls = part.null_count().row(0)
        empty = [c for c, k in zip(part.columns, nulls, strict=True) if k == part.height and c not in _TIMED_KEPT]
        # (taken by name: a ``drop`` is a query of its own)
        self.timed.append(part[[c for c in part.columns if c not in empty]] if empty else part)

    def _number_labels(self, raw: pl.DataFrame) -> pl.DataFrame:
        """String pids/tids ("Spans", "stream 7") get temporary ids, numbered finally in
        :meth:`final_label_ids`.  A numeric id in the temporary ids' range (at most -2**62:
        only a hostile trace has one) is taken as a label too, by its decimal text, so no
        trace's id is mistaken for a temporary one."""
        # (the least id against the range: a reduction, no mask of every row)
        reserved = [c for c in ("pid", "tid") if _at_most(raw.get_column(c).min(), _TEMP_LABEL_BASE)]
        if reserved:
            raw = raw.with_columns(
                e
                for c in reserved
                for e in (
                    pl.when(pl.col(c) <= _TEMP_LABEL_BASE)
                    .then(pl.col(c).cast(pl.String))
                    .otherwise(pl.col(c + "_label"))
                    .alias(c + "_label"),
                    pl.when(pl.col(c) > _TEMP_LABEL_BASE).then(pl.col(c)).alias(c),
                )
            )
        n = raw.height
        texts = [raw.get_column(c) for c in ("pid_label", "tid_label")]
        texts = [text for text in texts if text.null_count() < n]
        if not texts:
            return raw
        # (each column's distinct labels by a native value count: a concatenation, a
        # ``drop_nulls`` and a ``unique`` were two queries and a copy)
        for text in texts:
            for label in text.value_counts().get_column(text.name).to_list():
                if label is not None and label not in self.labels:
                    self.labels[label] = _TEMP_LABEL_BASE - len(self.labels)
        # each label's temporary id by an enum cast of the labels (every label of the chunk is
        # one of ``self.labels`` by now) and a gather, where the row has no numeric id: Series
        # work, no query of its own (a ``replace_strict`` in a ``with_columns`` paged in 1.5 MB
        # of polars' code that nothing else in a parse uses)
        enum = pl.Enum(list(self.labels))
        ids = pl.Series("", list(self.labels.values()), dtype=pl.Int64)
        out = raw.clone()  # (shallow: replacing a column of it leaves ``raw`` as it was)
        for col in ("pid", "tid"):
            text = raw.get_column(col + "_label")
            if text.null_count() == n:
                continue
            numeric = raw.get_column(col)
            labelled = ids[text.cast(enum).to_physical()]
            out.replace_column(out.get_column_index(col), numeric.zip_with(numeric.is_not_null(), labelled).alias(col))
        return out

    def final_label_ids(self) -> dict[int, int]:
        """Temporary id → final id: -1, -2, ... by sorted label."""
        return {self.labels[label]: -(i + 1) for i, label in enumerate(sorted(self.labels))}

    def _name_codes(self, timed: pl.DataFrame) -> pl.Expr:
        """The timed rows' event names as indices into the chunk's distinct names (an
        expression of :func:`_event_columns`' select, which has no query of its own).

        A chunk's names are mostly repeats, and a text column holds views into the text
        buffers it was cut from: kept as text, every part (and the sorted events table after
        it) would keep the scanner's whole name buffer of its chunk alive."""
        names = timed.get_column("name")
        name = pl.col("name")
        if names.null_count():  # (an event without a name is named ""; a fill copies the column, so only then)
            names = names.fill_null("")
            name = name.fill_null("")
        # (a native value count: ``unique`` is a query of its own; the order of the distinct
        # names is immaterial, as is unique's)
        distinct = names.value_counts().get_column(names.name)
        first = self.name_count
        self.names.append(distinct)
        self.name_count += distinct.len()
        if not distinct.len():
            return name.cast(pl.UInt32).alias("name")
        # a name's position among the distinct names is its code in an enum of them (the
        # cast costs 40 % less than a hash replacement; the names are never null here)
        codes = name.cast(pl.Enum(distinct)).to_physical().cast(pl.UInt32)
        return (codes + first if first else codes).alias("name")

    def take_names(self) -> tuple[pl.Series, pl.Series]:
        """The trace's distinct event names in sorted order, and for each index a timed
        part's ``name`` holds, the position of its name in them (so sorting the indices
        sorts the names)."""
        every = pl.concat(self.names) if self.names else pl.Series("name", [], dtype=pl.String)
        self.names.clear()
        if every.len() <= _NAMES_IN_PYTHON_MAX:
            # (a real trace's usual: hundreds of names a chunk.  Sorted in Python, by code
            # point, which is polars' order of their UTF-8 bytes; the names are never null)
            listed = every.to_list()
            distinct = sorted(set(listed))
            position = {name: i for i, name in enumerate(distinct)}
            ranks = pl.Series("name", [position[name] for name in listed], dtype=pl.UInt32)
            return pl.Series("name", distinct, dtype=pl.String), ranks
        ordered = every.unique().sort()
        return ordered, ordered.search_sorted(every).cast(pl.UInt32)

    def take_timed(self) -> pl.DataFrame:
        """All timed events (the list is emptied so only the result holds them)."""
        frame = pl.concat(self.timed, how="diagonal_relaxed", rechunk=False)
        self.timed.clear()
        return frame


#: :meth:`_Parts.take_names` sorts up to this many chunks' names in Python (in a fresh process
#: polars' unique, sort and search cost a millisecond more on rank0's 864)
_NAMES_IN_PYTHON_MAX = 4096

#: each event kind's physical code in ``EVENT_KIND``
_KIND_CODES = {kind: code for code, kind in enumerate(EVENT_KIND.categories.to_list())}


def _kind_mask(codes: pl.Series, kinds: Sequence[str]) -> pl.Series:
    """Where the physical ``EVENT_KIND`` codes ``codes`` are one of ``kinds``."""
    return _any_equal(codes, [_KIND_CODES[kind] for kind in kinds])


def _any_equal(column: pl.Series, values: Sequence[Any]) -> pl.Series:
    """Where ``column`` is one of ``values``, False where it is null (``is_in`` and a
    ``fill_null``, by native comparisons: the two are queries of their own)."""
    equal: pl.Series = column == values[0]
    for value in values[1:]:
        equal = equal | (column == value)
    if not equal.null_count():
        return equal
    # a null comparison (a null value) taken as False: the mask chooses itself where it
    # holds and the other side, all False, where it is False or null
    filled: pl.Series = equal.zip_with(equal, repeated(equal.name, False, pl.Boolean(), equal.len()))
    return filled


def _at_most(least: Any, bound: int) -> bool:
    """Whether a column's least value (None when it has none) is at most ``bound``."""
    return least is not None and least <= bound


def _rows(raw: pl.DataFrame, mask: pl.Series, columns: Sequence[str]) -> pl.DataFrame:
    """The rows of ``raw`` where ``mask`` holds, in ``columns`` only (taken before filtering;
    by name, which costs a tenth of a ``select``).  (Filtered by a frame's ``filter``, a
    query: filtering each column natively costs a quarter to a half less CPU, but the parts
    are then allocated on the caller's thread instead of polars' pool, and the peak RSS of
    a 1.1 GB trace's parse grew by 45-65 MB, of a fresh rank0 parse by 1.5-2 MB.)"""
    narrow = raw[list(columns)]
    count = mask.sum()
    if count == narrow.height:
        return narrow
    if count == 0:
        return narrow.clear()
    return narrow.filter(mask)


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The frames one after the other (the list is emptied); their types relaxed to a common
    one only where they differ (a relaxed concatenation is a query of its own, a plain one
    is not)."""
    if len(frames) == 1:
        out = frames[0]
    else:
        schema = frames[0].schema if frames else None
        same = all(f.schema == schema for f in frames[1:])
        out = pl.concat(frames, how="vertical" if same else "vertical_relaxed")
    frames.clear()
    return out


def _renumber(frame: pl.DataFrame, ids: dict[int, int], columns: Sequence[str] = ("pid", "tid")) -> pl.DataFrame:
    """Apply the final label ids to id columns (no-op when the trace had no string ids).

    Column by column on the Series and put back in place: a ``with_columns`` is a query of
    its own, about 0.25 ms each of the four times the end of the parse renumbers."""
    if not ids:
        return frame
    out = frame.clone()  # (shallow: replacing a column of it leaves ``frame`` as it was)
    for c in columns:
        out.replace_column(out.get_column_index(c), _final_id_series(out.get_column(c), ids))
    return out


def _final_id_series(column: pl.Series, ids: dict[int, int]) -> pl.Series:
    """``column`` with temporary label ids replaced by their final ids (others unchanged).

    Temporary ids are ``_TEMP_LABEL_BASE - k`` for k = 0, 1, ...: the final id is gathered
    at index k.  Only the ids handed out are temporary: a numeric id from the trace further
    down (a hostile pid of -2**63) stays what it is instead of indexing past the finals.  On
    the Series alone (comparisons, a gather and two ``zip_with``: no query), and the column
    itself where it holds no temporary id."""
    if not ids or column.len() == 0:
        return column
    temporary = (column <= _TEMP_LABEL_BASE) & (column > _TEMP_LABEL_BASE - len(ids))  # (null where the id is)
    if not temporary.any():
        return column
    finals = pl.Series([ids.get(_TEMP_LABEL_BASE - k) for k in range(len(ids))], dtype=pl.Int64)
    # every other row (and a null one: ``zip_with`` takes a null mask as false) reads index 0,
    # so the subtraction below stays in range for any id the trace has
    base = repeated("", _TEMP_LABEL_BASE, pl.Int64(), column.len())
    index = (_TEMP_LABEL_BASE - column.zip_with(temporary, base)).cast(pl.get_index_type())
    gathered: pl.Series = finals[index].alias(column.name)
    final: pl.Series = gathered.zip_with(temporary, column)
    return final


def _plus_base(frame: pl.DataFrame, base_ns: int, column: str = "start_ns") -> pl.DataFrame:
    """``frame`` with ``base_ns`` added to ``column``: a Series addition put back in place
    (no query), or the expression where the base does not fit int64 (polars then widens
    the column, as it always did)."""
    if not base_ns:
        return frame
    if not -(2**63) <= base_ns < 2**63:
        return frame.with_columns(pl.col(column) + base_ns)
    out = frame.clone()
    out.replace_column(out.get_column_index(column), out.get_column(column) + base_ns)
    return out


def _build_tables(
    path: Path,
    parts: _Parts,
    top: dict[str, Any],
    counter_rows: list[dict[str, Any]],
    warnings: list[str],
    *,
    truncated: bool,
) -> TraceTables:
    base_ns = _as_int(top.get("baseTimeNanoseconds")) or 0
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    rank = _as_int(dist.get("rank")) if dist else None
    world = _as_int(dist.get("world_size")) if dist else None
    backend = str(dist.get("backend")) if dist and dist.get("backend") is not None else None

    if not parts.timed:
        parts.add(_columns([]))
    ids = parts.final_label_ids()
    if sum(part.height for part in parts.meta) <= _THREADS_IN_PYTHON_MAX_ROWS:
        # a few rows (a real trace's usual): read in Python, no query at all
        threads = _threads_of_rows(_meta_rows(parts.meta, ids))
        parts.meta.clear()
    else:
        # only the rows :func:`_threads` reads, and of those only each (name, pid, tid)'s last,
        # in file order: traces repeat their metadata (mtia_rank_0 has 310 k rows of it, nine
        # of them distinct), and renumbering and grouping all of it cost more than this
        meta = _concat(parts.meta)
        name = pl.col("name")
        meta = meta.filter((name == "process_name") | (name == "thread_name"))
        meta = meta.filter(pl.struct(name == "thread_name", "pid", "tid").is_last_distinct())
        threads = _threads(_renumber(meta, ids))
        del meta
    flow_rows = _plus_base(_renumber(_concat(parts.flows), ids), base_ns)
    memory = _plus_base(_renumber(_concat(parts.memory), ids), base_ns)
    memory = MEMORY.conform(memory)
    if memory.height > 1:  # (a sort is a query, even of no rows)
        memory = memory.sort("start_ns", maintain_order=True)
    main_pid = _main_pid(_renumber(_concat(parts.launchers), ids, ("pid",)))
    if parts.unknown:
        cats = (
            _concat(parts.unknown).group_by("cat").agg(pl.col("len").sum())
            .sort(["len", "cat"], descending=[True, False], nulls_last=True)
        )
        total = int(cats["len"].sum())
        listing = ", ".join(f"{c}×{n}" for c, n in cats.head(5).iter_rows())
        warnings.append(f"{total:,} events of unrecognised categories kept as kind 'other' ({listing})")

    # the scans' freed buffers off the C heap before the tables are built (and once more
    # below, after the flow binding's)
    release_free_heap()
    names, name_ranks = parts.take_names()
    timed = [_final_event_columns(parts.take_timed(), ids, main_pid, rank, base_ns, name_ranks)]
    del name_ranks
    # the flows are bound before the canonical sort, to the event ids the sort will give,
    # so their temporaries come and go while only the unsorted events exist
    order, event_id = _canonical_order(timed[0])
    flows = _flows(flow_rows, _slices(timed[0], order, event_id))
    del event_id
    del flow_rows
    for helper in ("_track_pid", "_track_tid"):
        timed[0].drop_in_place(helper)
    # the unsorted events are handed over with no other reference left to them, so the
    # canonical sort can free each source column as soon as its sorted copy exists
    release_free_heap()
    events = finalize_events(timed.pop(), names=names, order=order)
    del names, order
    links = _links(events, flows)
    events = _fill_sync_threads(events, links)
    counters = _counters(counter_rows, base_ns)
    devices = _devices(top, events)

    first = events["start_ns"].min()
    last = events["end_ns"].max()
    info = TraceInfo(
        path=str(path),
        format="kineto",
        format_version=str(top.get("schemaVersion")) if top.get("schemaVersion") is not None else None,
        producer=_producer(top),
        rank=rank,
        world_size=world,
        backend=backend,
        ranks=(rank if rank is not None else 0,),
        start_ns=int(first) if isinstance(first, int) else None,
        end_ns=int(last) if isinstance(last, int) else None,
        truncated=truncated,
        warnings=tuple(warnings),
        metadata=_metadata(top),
    )
    return TraceTables(
        info=info,
        events=events,
        links=links,
        # (taken by name: a ``drop`` is a query, even of columns that are not there)
        flows=flows[[c for c in flows.columns if c not in ("_src_order", "_dst_order")]],
        devices=devices,
        threads=threads,
        counters=counters,
        memory=memory,
    )


#: :func:`_main_pid` sums up to this many per-chunk counts in Python (a chunk has a row per
#: process and role, so a real trace has tens); more go through polars' grouping and sort
_MAIN_PID_IN_PYTHON_MAX_ROWS = 4096


def _main_pid(counts: pl.DataFrame) -> int | None:
    """The process that launched GPU work (owner of GPU rows in the canonical tables):
    most runtime/driver calls, else most CPU operators; ties go to the lower pid."""
    if counts.height > _MAIN_PID_IN_PYTHON_MAX_ROWS:
        return _main_pid_grouped(counts)
    # the few rows summed in Python (a grouping, two filters and a sort were four queries)
    totals: dict[tuple[Any, Any], int] = {}
    for pid, launch, n in zip(*(counts.get_column(c).to_list() for c in ("pid", "launch", "len")), strict=True):
        totals[(pid, launch)] = totals.get((pid, launch), 0) + n
    for role in (True, False):
        # most events first, then the lower pid; a null pid sorts before every pid, as in
        # :func:`_main_pid_grouped`'s sort (nulls first)
        ranked = [(-n, pid is not None, pid if pid is not None else 0) for (pid, launch), n in totals.items() if launch is role]
        if ranked:
            _, has_pid, pid = min(ranked)
            return int(pid) if has_pid else None
    return None


def _main_pid_grouped(counts: pl.DataFrame) -> int | None:
    """:func:`_main_pid` by polars' grouping and sort (for many rows)."""
    totals = counts.group_by("pid", "launch").agg(pl.col("len").sum())
    launchers = totals.filter(pl.col("launch"))
    if launchers.height == 0:
        launchers = totals.filter(~pl.col("launch"))
    if launchers.height == 0:
        return None
    value = launchers.sort(["len", "pid"], descending=[True, False])["pid"][0]
    return int(value) if value is not None else None


def _event_columns(
    timed: pl.DataFrame,
    dtypes: Mapping[str, pl.DataType] | None = None,
    copy_names: _CopyNames | None = None,
    memo: dict[Any, list[pl.Expr | str]] | None = None,
    name: pl.Expr | None = None,
    built: dict[Any, pl.Expr] | None = None,
) -> pl.DataFrame:
    """One chunk's timed events in canonical columns; ``pid``/``tid`` are still the track's
    (GPU rows get the main process in :func:`_final_event_columns`).  ``timed`` has the
    rows' ``kind``, ``_complete`` (whether the row is a complete event) and the masks
    ``_on_gpu``, ``_memcpy`` and ``_sync`` besides its source columns.  ``name``: the
    ``name`` column's expression (:meth:`_Parts._name_codes`; default: the text).

    A source column ``timed`` lacks (``dtypes``: the types it had in the chunk) was null on
    every row: a column made from such columns alone would be null on every row too, which
    :meth:`_Parts.add` drops, so it is left out here (most chunks have a third of the columns).
    ``memo`` keeps the expressions built for each set of columns (building them costs
    0.3 ms of Python a chunk, and most chunks of a trace have the same columns), ``built``
    each output's expression (:func:`_event_exprs`)."""
    have = frozenset(timed.columns)
    # the text work on event names (copy direction and memory kinds, sync kinds) is done on
    # the few memcpy and sync rows alone, then put back at their rows
    text = _text_columns(timed, timed.get_column("_memcpy"), timed.get_column("_sync"), copy_names)
    key = (have, frozenset((dtypes or {}).items()))
    exprs = memo.get(key) if memo is not None else None
    if exprs is None:
        # (a chunk with other columns than the chunks before: most of its expressions were
        # built for them already)
        exprs = _event_exprs(have, dtypes or {}, built)
        if memo is not None:
            memo[key] = exprs
    made = [column.alias("_" + c) for c, column in text.items() if isinstance(column, pl.Series)]
    columns: dict[str, pl.Expr] = {c: pl.col("_" + c).alias(c) if isinstance(v, pl.Series) else v for c, v in text.items()}
    columns["name"] = pl.col("name") if name is None else name
    return (timed.hstack(made) if made else timed).select(columns[e] if isinstance(e, str) else e for e in exprs)


def _source(have: frozenset[str], dtypes: Mapping[str, pl.DataType]) -> Callable[[str], pl.Expr]:
    """A source column by name: the column, or a null of its type where the chunk lacks it."""

    def source(name: str) -> pl.Expr:
        if name in have:
            return pl.col(name)
        return pl.lit(None, dtype=dtypes.get(name, pl.Int64())).alias(name)

    return source


def _event_exprs(
    have: frozenset[str], dtypes: Mapping[str, pl.DataType], built: dict[Any, pl.Expr] | None = None
) -> list[pl.Expr | str]:
    """:func:`_event_columns`' outputs for a chunk with the source columns ``have``: an
    expression, or the name of a text column :func:`_text_columns` gives.  Only the outputs
    the chunk has a source for are built (most chunks lack most argument columns, and
    building an expression costs several µs a call); ``built``: the expressions built
    before, by output and what it was built from (kept and reused)."""
    source = _source(have, dtypes)
    kind = pl.col("kind")
    on_gpu = pl.col("_on_gpu")
    is_sync = pl.col("_sync")

    def device() -> pl.Expr:
        return pl.when(on_gpu | is_sync).then(pl.coalesce(source("device"), pl.col("pid"))).otherwise(None)

    def stream() -> pl.Expr:
        tid_stream = (
            pl.coalesce(pl.col("tid"), pl.col("tid_label").str.extract(r"(\d+)", 1).cast(pl.Int64, strict=False))
            if "tid_label" in have
            else pl.coalesce(pl.col("tid"))
        )
        value = source("stream")
        return (
            pl.when(on_gpu)
            .then(pl.coalesce(value, tid_stream))
            .when(is_sync)
            .then(pl.when(value >= 0).then(value).otherwise(None))
            .otherwise(None)
        )

    def duration() -> pl.Expr:
        # a complete event's duration, 0 when it has none or a negative one; every other
        # row's 0 (for integers by one comparison: a ``fill_null`` and ``clip`` of the
        # column cost 5-20 times as much; floats, which no reader gives now, keep the clip)
        dur = pl.col("dur")
        if dtypes.get("dur", pl.Int64()).is_integer():
            return pl.when(pl.col("_complete") & (dur > 0)).then(dur).otherwise(0).alias("dur_ns")
        return pl.when(pl.col("_complete")).then(dur.fill_null(0).clip(lower_bound=0)).otherwise(0).alias("dur_ns")

    def at_least(name: str, least: int, out: str, when: pl.Expr | None = None) -> pl.Expr:
        value = source(name)
        keep = value >= least if when is None else when & (value >= least)
        return pl.when(keep).then(value).otherwise(None).alias(out)

    # (the columns each output is made from, and a builder of the output, or the name of a
    # text column; None: always made)
    outputs: list[tuple[tuple[str, ...] | None, Callable[[], pl.Expr] | str]] = [
        (None, lambda: pl.col("_order")),
        (None, lambda: kind),
        (None, "name"),  # (the name's code: the caller's expression)
        (None, lambda: pl.col("pid")),
        (None, lambda: pl.col("tid").cast(pl.Int64)),
        (("device", "pid"), lambda: device().cast(pl.Int32, strict=False).alias("device")),
        (("stream", "tid", "tid_label"), lambda: stream().alias("stream")),
        (None, lambda: pl.col("start_ns")),
        (("dur",), duration),
        (("correlation",), lambda: source("correlation")),
        (("external_id", "external_id_v1"),
         lambda: pl.coalesce(source("external_id"), source("external_id_v1")).alias("external_id")),
        (("bytes",), lambda: source("bytes")),
        (None, "memcpy_kind"),
        (None, "src_memory"),
        (None, "dst_memory"),
        (("grid",), lambda: source("grid").alias("grid_blocks")),
        (("block",), lambda: source("block").alias("block_threads")),
        (("registers",), lambda: source("registers").cast(pl.Int32, strict=False).alias("registers_per_thread")),
        (("shared_memory",), lambda: source("shared_memory").alias("shared_memory_bytes")),
        (("occupancy",), lambda: source("occupancy").alias("occupancy_pct")),
        (None, "sync_kind"),
        (("wait_on_stream",), lambda: at_least("wait_on_stream", 0, "wait_stream", is_sync)),
        (("wait_corr",), lambda: at_least("wait_corr", 0, "wait_event_correlation")),
        (("sequence_nr",), lambda: source("sequence_nr")),
        (("python_id",), lambda: source("python_id")),
        (("python_parent_id",), lambda: source("python_parent_id")),
        (("input_dims",), lambda: source("input_dims")),
        (("input_types",), lambda: source("input_types")),
        (("concrete_inputs",), lambda: source("concrete_inputs")),
        (("collective",), lambda: source("collective")),
        (("pg_name",), lambda: source("pg_name").alias("process_group")),
        (("pg_ranks",), lambda: source("pg_ranks").alias("group_ranks")),
        (("group_size",),
         lambda: pl.when(source("group_size") > 0).then(source("group_size")).otherwise(None)
         .cast(pl.Int32, strict=False).alias("group_size")),
        (("coll_seq", "coll_seq_v2"),
         lambda: pl.coalesce(source("coll_seq"), source("coll_seq_v2")).alias("collective_seq")),
        (("msg_elems",), lambda: at_least("msg_elems", 0, "message_elements")),
    ]
    exprs: list[pl.Expr | str] = []
    for at, (sources, made) in enumerate(outputs):
        if sources is not None and not any(s in have for s in sources):
            continue
        if isinstance(made, str) or built is None:
            exprs.append(made if isinstance(made, str) else made())
            continue
        # an output's expression depends on which of its sources the chunk has, and on
        # their types (the null literals of those it lacks): built once per parse for each
        key = (at, *(s in have for s in sources or ()), *(dtypes.get(s) for s in sources or ()))
        expr = built.get(key)
        if expr is None:
            expr = built[key] = made()
        exprs.append(expr)
    return exprs


def _text_columns(
    timed: pl.DataFrame, memcpy: pl.Series, sync: pl.Series, copy_names: _CopyNames | None = None
) -> dict[str, pl.Series | pl.Expr]:
    """``memcpy_kind``, ``src_memory``, ``dst_memory`` (the rows where ``memcpy`` holds) and
    ``sync_kind`` (the rows where ``sync`` holds) of one chunk's timed events, null on every
    other row.

    The text work is done on the flagged rows alone (natively filtered; a memcpy row's values
    gathered natively by its name's code, a sync row's made in one small query), and the
    values scattered natively into columns of nulls (a gather by each row's position among
    the flagged ones cost a tenth of a millisecond a column in the caller's select).  A column whose rows the chunk does not have (no memcpy, no sync:
    most chunks) is a null literal the caller's select broadcasts."""
    out: dict[str, pl.Series | pl.Expr] = {}
    names = timed.get_column("name")
    if memcpy.any():
        index, said = (copy_names or _CopyNames()).lookup(names.filter(memcpy))
        code = index.to_physical()
        # (native gathers by the codes: a select of gathers costs several times as much)
        values = pl.DataFrame([said.get_column(c)[code] for c in ("memcpy_kind", "src_memory", "dst_memory")])
        if "kind_arg" in timed.columns:  # the ``kind`` argument when it is a direction and all of it
            kind_arg = pl.lit(timed.get_column("kind_arg").filter(memcpy))
            memcpy_kind = pl.select(
                pl.coalesce(pl.lit(said.get_column("direction")[code]), pl.when(kind_arg.is_in(_DIRECTIONS)).then(kind_arg))
                .fill_null("unknown")
                .cast(MEMCPY_KIND)
                .alias("memcpy_kind")
            )
            values = values.replace_column(0, memcpy_kind.to_series())
        out.update(_scattered(values, memcpy))
    else:
        out["memcpy_kind"] = pl.lit(None, dtype=MEMCPY_KIND).alias("memcpy_kind")
        out["src_memory"] = pl.lit(None, dtype=MEMORY_KIND).alias("src_memory")
        out["dst_memory"] = pl.lit(None, dtype=MEMORY_KIND).alias("dst_memory")
    if sync.any():
        said_name = pl.lit(names.filter(sync))
        if "sync_kind" in timed.columns:  # the ``sync_kind`` argument where there is one, else the name
            said_name = pl.coalesce(pl.lit(timed.get_column("sync_kind").filter(sync)), said_name)
        values = pl.select(
            said_name.str.to_lowercase()
            .replace_strict(_SYNC_NAMES, default="unknown", return_dtype=pl.String).cast(SYNC_KIND)
            .alias("sync_kind")
        )
        out.update(_scattered(values, sync))
    else:
        out["sync_kind"] = pl.lit(None, dtype=SYNC_KIND).alias("sync_kind")
    return out


#: the copy directions a memcpy's name or ``kind`` argument names
_DIRECTIONS = ["HtoD", "DtoH", "DtoD", "HtoH", "PtoP"]


class _CopyNames:
    """What a memcpy's name says (its copy direction, source and destination memory), worked
    out once per distinct name of the trace and looked up by an enum of the names after: the
    regular expressions cost about 0.1 ms a call however few the rows, and a trace has a
    handful of memcpy names."""

    def __init__(self) -> None:
        #: each name seen so far → its row in ``said``
        self.rows: dict[str, int] = {}
        #: an enum of the names in row order, made when they change (not on every lookup)
        self.codes: pl.Enum | None = None
        self.said: pl.DataFrame | None = None

    def lookup(self, names: pl.Series) -> tuple[pl.Series, pl.DataFrame]:
        """Each of ``names`` as an index into the second result, which has ``direction``
        (null where the name names none), ``memcpy_kind`` (the direction, or ``unknown``),
        ``src_memory`` and ``dst_memory`` for every name seen so far (a null name says what
        an empty one says: nothing).  The index is an enum of the names: its physical codes
        are the row numbers."""
        if names.null_count():  # (a fill copies the names even when there is nothing to fill)
            names = names.fill_null("")
        index = None if self.codes is None else names.cast(self.codes, strict=False)
        if index is None or index.null_count() or self.said is None:
            # the names not seen before, among the distinct ones (a native value count: a
            # mask of the unknown rows and ``unique`` would be two queries)
            distinct = names.value_counts().get_column(names.name).to_list()
            new = [name for name in distinct if name not in self.rows]
            said = _copy_names_said(pl.Series("name", new, dtype=pl.String))
            for name in new:
                self.rows[name] = len(self.rows)
            self.said = said if self.said is None else pl.concat([self.said, said])
            self.codes = pl.Enum(list(self.rows))
            index = names.cast(self.codes)
        return index, self.said


#: :func:`_copy_names_said`'s expressions in Python's ``re`` for ASCII text: the classes
#: spelled out as what polars' (Unicode) ``\w`` and ``\s`` match among ASCII characters
#: (Python's own ``\s`` also matches \x1c-\x1f, polars' does not)
_ASCII_DIRECTION = re.compile(r"HtoD|DtoH|DtoD|HtoH|PtoP")
_ASCII_SOURCE = re.compile(r"\(([0-9A-Za-z_]+)[\t\n\x0b\x0c\r ]*->")
_ASCII_DESTINATION = re.compile(r"->[\t\n\x0b\x0c\r ]*([0-9A-Za-z_]+)\)")
#: at most this many names are read by Python's ``re`` (a few µs each), more by polars
_PYTHON_COPY_NAMES = 256
_COPY_SAID_SCHEMA: dict[str, pl.DataType] = {
    "direction": pl.String(), "memcpy_kind": MEMCPY_KIND, "src_memory": MEMORY_KIND, "dst_memory": MEMORY_KIND
}


def _copy_names_said(names: pl.Series, python: bool | None = None) -> pl.DataFrame:
    """What each memcpy name says: ``direction`` (null where it names none), ``memcpy_kind``
    (the direction, or ``unknown``), ``src_memory`` and ``dst_memory`` (a memory kind's word in
    ``(src -> dst)``, lower-cased, or ``unknown``).

    A handful of ASCII names (the usual case: each memcpy name of a trace, once) is read by
    Python's ``re``: polars compiles a regular expression on every call, 0.25 ms each, four
    of them (3 ms a lookup, twice a parse on a typical trace); other names by polars, whose
    answer is the reference (``python``: force one way, for the test comparing the two)."""
    if python is None:
        python = names.len() <= _PYTHON_COPY_NAMES
    texts: list[str] = names.to_list() if python else []
    if python and all(text.isascii() for text in texts):
        memory_words = set(MEMORY_KIND.categories.to_list())

        def word(pattern: re.Pattern[str], text: str) -> str:
            found = pattern.search(text)
            return found.group(1) if found is not None and found.group(1) in memory_words else "unknown"

        directions = [(found.group(0) if (found := _ASCII_DIRECTION.search(text)) else None) for text in texts]
        lowered = [text.lower() for text in texts]
        columns: dict[str, list[str | None]] = {
            "direction": directions,
            "memcpy_kind": [d if d is not None else "unknown" for d in directions],
            "src_memory": [word(_ASCII_SOURCE, text) for text in lowered],
            "dst_memory": [word(_ASCII_DESTINATION, text) for text in lowered],
        }
        # (text columns cast to their enums: a third of the time of enum columns from Python)
        return pl.DataFrame(
            [pl.Series(c, values, dtype=pl.String).cast(_COPY_SAID_SCHEMA[c]) for c, values in columns.items()]
        )
    lname = pl.col("name").str.to_lowercase()
    direction = pl.col("name").str.extract(r"(HtoD|DtoH|DtoD|HtoH|PtoP)", 1)
    return names.alias("name").to_frame().select(
        direction.alias("direction"),
        direction.fill_null("unknown").cast(MEMCPY_KIND).alias("memcpy_kind"),
        _memory_kind(lname.str.extract(r"\((\w+)\s*->", 1)).alias("src_memory"),
        _memory_kind(lname.str.extract(r"->\s*(\w+)\)", 1)).alias("dst_memory"),
    )


def _scattered(values: pl.DataFrame, flag: pl.Series) -> dict[str, pl.Series]:
    """The columns of ``values`` (a row for each row where ``flag`` holds, in order) at those
    rows and null elsewhere, by name."""
    rows = pl.int_range(0, flag.len(), dtype=pl.UInt32, eager=True).filter(flag)
    return {
        column.name: repeated(column.name, None, column.dtype, flag.len()).scatter(rows, column)
        for column in values.get_columns()
    }


def _final_event_columns(
    timed: pl.DataFrame, ids: dict[int, int], main_pid: int | None, rank: int | None, base_ns: int,
    name_ranks: pl.Series,
) -> pl.DataFrame:
    """What needs the whole trace: final string ids, the main process on GPU rows (the
    track's ids are kept for flow binding), the rank, the base time, and each event's name
    as its position among the trace's sorted distinct names (:meth:`_Parts.take_names`)."""
    # on the Series, each column put back in place (two ``with_columns`` cost more than all
    # of it: a query each); columns kept in the order those gave: the helpers and the rank last
    kind = timed.get_column("kind")
    on_gpu = _any_equal(kind, GPU_KINDS)
    no_tid = _any_equal(kind, (*GPU_KINDS, EventKind.SYNC.value))
    rows = timed.height
    track_pid = _final_id_series(timed.get_column("pid"), ids).alias("_track_pid")
    track_tid = _final_id_series(timed.get_column("tid"), ids).alias("_track_tid")
    if main_pid is not None and track_pid.null_count() == 0 and track_pid.min() == main_pid == track_pid.max():
        pid = track_pid.alias("pid")  # every row is the main process already (a trace of one process)
    else:
        main = repeated("pid", main_pid, pl.Int64(), rows)
        pid = main.zip_with(on_gpu, track_pid).alias("pid")
    tid = repeated("tid", None, track_tid.dtype, rows).zip_with(no_tid, track_tid)
    out = timed.clone()
    for column in (pid, tid.cast(pl.Int64), name_ranks[timed.get_column("name")].alias("name")):
        out.replace_column(out.get_column_index(column.name), column)
    out = _plus_base(out, base_ns)
    rank_column = repeated("rank", rank if rank is not None else 0, pl.Int32(), rows)
    return out.hstack([track_pid, track_tid, rank_column])


def _memory_kind(word: pl.Expr) -> pl.Expr:
    """The memory kind a word of a memcpy's name names: one of the kind's own words, else
    ``unknown`` (also when there is no word)."""
    return word.cast(MEMORY_KIND, strict=False).fill_null(pl.lit("unknown", dtype=MEMORY_KIND))


#: :func:`_threads` groups up to this many metadata rows in Python (a real trace has a few
#: dozen once each name's last is kept); more go through polars' grouping and joins
_THREADS_IN_PYTHON_MAX_ROWS = 4096


def _threads(meta: pl.DataFrame) -> pl.DataFrame:
    """Process and thread names from the ``ph: M`` rows (in file order: the last one wins)."""
    if meta.height > _THREADS_IN_PYTHON_MAX_ROWS:
        return _threads_grouped(meta)
    return _threads_of_rows(zip(*(meta.get_column(c).to_list() for c in ("name", "pid", "tid", "label")), strict=True))


def _meta_rows(parts: list[pl.DataFrame], ids: dict[int, int]) -> Iterator[tuple[Any, Any, Any, Any]]:
    """The metadata parts' (name, pid, tid, label) rows in file order, the label ids final
    (a temporary id is a key of ``ids``, and every key is one: :func:`_final_id_series`)."""
    for part in parts:
        columns = [part.get_column(c).to_list() for c in ("name", "pid", "tid", "label")]
        for name, pid, tid, label in zip(*columns, strict=True):
            if name == "process_name" or name == "thread_name":
                yield name, ids.get(pid, pid), ids.get(tid, tid), label


def _threads_of_rows(meta: Iterable[tuple[Any, Any, Any, Any]]) -> pl.DataFrame:
    """:func:`_threads` of (name, pid, tid, label) rows in file order, grouped in Python (the
    grouping, two joins and a ``unique`` were five queries): the last label of each process
    and of each thread, a thread's process name by its pid (a null pid matches nothing, as in
    a join), the processes without a thread."""
    procs: dict[Any, Any] = {}
    threads: dict[tuple[Any, Any], Any] = {}
    for name, pid, tid, label in meta:
        if name == "process_name":
            procs[pid] = label
        elif name == "thread_name":
            threads[(pid, tid)] = label
    # each row's columns as :func:`_threads_grouped` works them out, in Python (a few rows:
    # the regular expressions, casts and sort of one polars query cost 2 ms and paged in
    # 2 MB of polars' regex and sort code): a thread named as a stream is a GPU track of the
    # device its pid names, and has neither pid nor tid
    rows: list[tuple[Any, Any, Any, Any, Any, Any]] = []
    for (pid, tid), thread_name in threads.items():
        process_name = procs.get(pid) if pid is not None else None
        stream = _stream_number(thread_name)
        device = None if stream is None else _int32_or_none(pid)
        if device is not None:
            pid = tid = None
        name = None if thread_name is None else thread_name.strip(_WHITE_SPACE)
        rows.append((pid, tid, device, stream, process_name, name))
    with_threads = {pid for pid, _ in threads}
    rows.extend((pid, None, None, None, label, None) for pid, label in procs.items() if pid is None or pid not in with_threads)
    # sorted by every column, nulls last (texts by code point, which is polars' order of
    # their UTF-8 bytes); rows equal in every key are equal rows
    rows.sort(key=lambda r: tuple((value is None, value) for value in (r[0], r[1], r[2], r[3], r[5], r[4])))
    columns = list(zip(*rows, strict=True)) if rows else [()] * 6
    return pl.DataFrame(
        [
            pl.Series(column.name, values, dtype=column.dtype)
            for column, values in zip(THREADS.columns, columns, strict=True)
        ]
    )


#: Unicode's White_Space characters: polars' (Rust's) ``\s`` and ``strip_chars``; Python's
#: ``\s`` and ``str.strip()`` also take the four separators U+001C to U+001F
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
#: a stream's thread name: "stream" (any case) and an ASCII digit, after white space
_STREAM_NAME = re.compile(f"[{_WHITE_SPACE}]*stream[{_WHITE_SPACE}]+[0-9]", re.IGNORECASE)
_ASCII_DIGITS = re.compile("[0-9]+")


def _stream_number(name: str | None) -> int | None:
    """A thread name's stream number: its first run of ASCII digits, where the name is a
    stream's and the number fits int64 (None otherwise)."""
    if name is None or _STREAM_NAME.match(name) is None:
        return None
    digits = _ASCII_DIGITS.search(name)
    assert digits is not None  # (the name has one after "stream")
    number = int(digits.group())
    return number if number < 2**63 else None


def _int32_or_none(value: int | None) -> int | None:
    """``value`` where it fits int32 (a non-strict cast's result), else None."""
    return value if value is not None and -(2**31) <= value < 2**31 else None


def _threads_grouped(meta: pl.DataFrame) -> pl.DataFrame:
    """:func:`_threads` by polars' grouping and joins (for many metadata rows)."""
    procs = (
        meta.filter(pl.col("name") == "process_name")
        .group_by("pid")
        .agg(pl.col("label").last().alias("process_name"))
    )
    thr = (
        meta.filter(pl.col("name") == "thread_name")
        .group_by("pid", "tid")
        .agg(pl.col("label").last().alias("thread_name"))
    )
    rows = thr.join(procs, on="pid", how="left")
    # ASCII digits: a Unicode one (``\d``) is no stream number, and ended the parse in an
    # error where a thread was named so; a number too large for int64 is no stream either
    is_stream = pl.col("thread_name").str.contains(r"(?i)^\s*stream\s+[0-9]")
    number = pl.col("thread_name").str.extract(r"([0-9]+)", 1).cast(pl.Int64, strict=False)
    rows = rows.with_columns(pl.when(is_stream).then(number).otherwise(None).alias("stream"))
    rows = rows.with_columns(
        pl.when(pl.col("stream").is_not_null())
        .then(pl.col("pid").cast(pl.Int32, strict=False))
        .otherwise(None)
        .alias("device"),
    )
    rows = rows.with_columns(
        pl.when(pl.col("device").is_null()).then(pl.col("pid")).otherwise(None).alias("pid"),
        pl.when(pl.col("device").is_null()).then(pl.col("tid")).otherwise(None).alias("tid"),
        pl.col("thread_name").str.strip_chars(),
    )
    only_procs = procs.join(thr.select("pid").unique(), on="pid", how="anti").with_columns(
        pl.lit(None, dtype=pl.Int64).alias("tid"), pl.lit(None, dtype=pl.String).alias("thread_name")
    )
    out = pl.concat([THREADS.conform(rows), THREADS.conform(only_procs)], how="vertical")
    # every column is a sort key: several streams can share a number (queue and stream
    # tracks of one device), and group_by gives no order of its own
    return out.sort(["pid", "tid", "device", "stream", "thread_name", "process_name"], nulls_last=True)


def _track_key(pid: str, tid: str, start: str) -> pl.Expr:
    """One 64-bit hash of (pid, tid, start): single-column joins and sets cost a fraction of
    multi-column ones on millions of rows; matches are checked on the real columns."""
    return pl.struct(pl.col(pid).alias("p"), pl.col(tid).alias("t"), pl.col(start).alias("s")).hash(seed=0)


def _slices(timed: pl.DataFrame, order: pl.Series, event_id: pl.Series | None = None) -> pl.DataFrame:
    """Every timed event's track, start and the event id the canonical sort will give it
    (``order`` is :func:`canonical_order` of ``timed``; ``event_id``, where given, its
    inverse, the event ids themselves)."""
    if event_id is None:
        event_id = pl.Series("event_id", [], dtype=pl.Int64).extend_constant(None, order.len())
        if order.len():
            event_id = event_id.scatter(order, pl.int_range(0, order.len(), dtype=pl.Int64, eager=True))
    # from the columns alone: a ``select`` on the frame (many chunks a column) would first
    # copy every column of it into one chunk
    return pl.DataFrame([*(timed.get_column(c) for c in ("_track_pid", "_track_tid", "start_ns")), event_id])


#: every flow kind, at its position in the enum (a code's kind is gathered from it)
_FLOW_KINDS = pl.Series("flow_kind", FLOW_KIND.categories.to_list(), dtype=FLOW_KIND)


def _flow_kind_series(cat: pl.Series) -> tuple[pl.Series, pl.Series]:
    """The flow kind of each lower-cased category, and its code (UInt32, the kind's position
    in the enum): comparisons with the few known categories (a fraction of the cost of a
    hash ``replace`` of every row's text), each kind's code put where one of its words
    matches, the rest ``other``; on the Series, the enum gathered by code (no query)."""
    rows = cat.len()
    codes = repeated("", _FLOW_CODES[FlowKind.OTHER.value], pl.UInt32(), rows)
    for value in dict.fromkeys(_FLOW_CATEGORY.values()):
        matches = _any_equal(cat, [c for c, v in _FLOW_CATEGORY.items() if v == value])
        codes = repeated("", _FLOW_CODES[value], pl.UInt32(), rows).zip_with(matches, codes)
    return _FLOW_KINDS[codes].alias("flow_kind"), codes


#: each flow kind's position in the enum
_FLOW_CODES = {kind: i for i, kind in enumerate(FLOW_KIND.categories.to_list())}


def _bind_endpoints(flow_rows: pl.DataFrame, keyed: pl.DataFrame) -> pl.Series:
    """Each flow endpoint's slice: the innermost slice starting at its timestamp on its
    track (shortest; among equal ones the later in canonical order), null where none.

    The canonical order sorts rows of one start time by duration, longest first, so among
    the slices that start together the innermost one is the one with the largest event id.
    The rows are joined on one 64-bit hash of (pid, tid, start) and the matches checked on
    the real columns; the native binding (tracekit/native/_flowbind.c), where it was built, gives
    the same result from one hash table over the endpoints' keys."""
    native = load("flowbind")
    if native is not None:
        columns = [
            *(flow_rows.get_column(c).cast(pl.Int64) for c in ("pid", "tid", "start_ns")),
            *(keyed.get_column(c).cast(pl.Int64) for c in ("_track_pid", "_track_tid", "start_ns", "event_id")),
        ]
        return pl.Series(ArrowCapsules(native.bind(*columns))).alias("event_id")
    ends = flow_rows.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"), "pid", "tid", "start_ns",
        _track_key("pid", "tid", "start_ns").alias("_key"),
    )
    slices = keyed.select(
        "event_id", "_track_pid", "_track_tid", pl.col("start_ns").alias("_slice_start"),
        _track_key("_track_pid", "_track_tid", "start_ns").alias("_key"),
    )
    bound = (
        ends.join(slices, on="_key", how="inner")
        .filter(
            (pl.col("pid") == pl.col("_track_pid"))
            & (pl.col("tid") == pl.col("_track_tid"))
            & (pl.col("start_ns") == pl.col("_slice_start"))
        )
        .group_by("_row")
        .agg(pl.col("event_id").max())
    )
    # each endpoint's slice put at its row (``_row`` is 0..n-1 and unique in ``bound``): a
    # scatter in place of a left join and the sort back into file order that followed it
    event_id = pl.repeat(None, flow_rows.height, dtype=pl.Int64, eager=True).alias("event_id")
    if bound.height:
        event_id = event_id.scatter(bound["_row"], bound["event_id"])
    return event_id


def _flows(flow_rows: pl.DataFrame, keyed: pl.DataFrame) -> pl.DataFrame:
    if flow_rows.height == 0:
        return FLOWS.empty().with_columns(pl.lit(None, dtype=pl.Int64).alias("_src_order"))
    # the row's end ("s" source, "f" destination, "t" a step, which pairs with nothing)
    # compared once, as two flags; each column on the Series (a ``select`` and a
    # ``with_columns`` were a query each)
    ph = flow_rows.get_column("ph")
    id_column = flow_rows.get_column("id")
    labels = flow_rows.get_column("id_label")
    if labels.null_count() < labels.len():
        id_column = flow_rows.select(pl.coalesce(pl.col("id"), pl.col("id_label").cast(pl.Int64, strict=False))).to_series()
    kind_column, kind_codes = _flow_kind_series(flow_rows.get_column("_cat"))
    ends = pl.DataFrame(
        [
            (ph == "s").alias("_src"),
            (ph == "f").alias("_dst"),
            kind_column,
            id_column.alias("flow_id"),
            _bind_endpoints(flow_rows, keyed),
        ]
    )
    del flow_rows, ph, id_column, labels, kind_column

    def first_end(end: str, name: str) -> pl.DataFrame:
        return ends.filter(pl.col(end)).group_by("flow_id", "flow_kind").agg(pl.col("event_id").first().alias(name))

    if ends["flow_id"].null_count():
        joined = first_end("_src", "src_event_id").join(
            first_end("_dst", "dst_event_id"), on=["flow_id", "flow_kind"], how="full", coalesce=True
        )
        # (the ends too: the rows of null ids, a source-only and a destination-only one per
        # kind, otherwise came in the grouping's arbitrary order, differing between runs)
        return FLOWS.conform(joined).sort(["flow_kind", "flow_id", "src_event_id", "dst_event_id"])
    native = _native_pairing(ends.height)
    if native is not None:
        # the native pairing (tracekit/native/_flowbind.c): every (kind, id) with its first source
        # and destination in one pass over the rows, the flows handed back in the order
        # below, by (kind, id) (on up to :data:`_NATIVE_PAIRING_MAX_ROWS` endpoints)
        # (the end as uint8 flags and the kind as its uint32 codes: the native pairing reads
        # narrow integers as they are, so no int64 copy of either is made)
        end = ends.get_column("_src").cast(pl.UInt8) + 2 * ends.get_column("_dst").cast(pl.UInt8)
        kind = kind_codes
        flow_ids = ends.get_column("flow_id").cast(pl.Int64)
        event_id = ends.get_column("event_id").cast(pl.Int64)
        del ends
        ids, codes, src, dst = (pl.Series(ArrowCapsules(p)) for p in native.pair(end, kind, flow_ids, event_id))
        return pl.DataFrame([ids, _FLOW_KINDS[codes].alias("flow_kind"), src, dst])
    # both ends of every flow from one stable sort by (kind, id): the rows of a flow are
    # then contiguous and in file order, so its first source and first destination are the
    # first "s" and "f" rows of its run (no grouping by hash, no join of the two ends)
    paired = ends.get_column("_src") | ends.get_column("_dst")
    if not paired.all():
        ends = ends.filter(paired)
    del paired
    if ends.height == 0:
        return FLOWS.empty()
    kinds = ends.get_column("flow_kind").to_physical()
    if kinds.min() == kinds.max():
        ends = ends.sort("flow_id", maintain_order=True)
    else:
        ends = ends.sort("flow_kind", "flow_id", maintain_order=True)
    flow_id, flow_kind = pl.col("flow_id"), pl.col("flow_kind")
    starts = ((flow_id != flow_id.shift(1)) | (flow_kind != flow_kind.shift(1))).fill_null(True)
    runs = ends.select(
        (starts.cum_sum() - 1).cast(pl.Int64).alias("_flow"), "_src", "event_id",
    )
    out = ends.filter(starts).select("flow_id", "flow_kind")
    for name, is_src in (("src_event_id", True), ("dst_event_id", False)):
        side = runs.filter(pl.col("_src") if is_src else ~pl.col("_src"))
        first = side.filter((pl.col("_flow") != pl.col("_flow").shift(1)).fill_null(True))
        column = pl.repeat(None, out.height, dtype=pl.Int64, eager=True).alias(name)
        if first.height:
            column = column.scatter(first["_flow"], first["event_id"])
        out = out.with_columns(column)
    return FLOWS.conform(out)


def _links(events: pl.DataFrame, flows: pl.DataFrame) -> pl.DataFrame:
    """Launch → GPU activity links: by correlation id where it names exactly one launch
    call, else by a launch flow between a launch call and a GPU activity."""
    by_corr = _correlation_links(events)
    kinds = events.get_column("kind")
    # on the Series (a filter, a Series' ``gather`` and ``is_in`` are a query each): the launch
    # flows with both ends bound (an id equals itself unless it is null, and a filter drops a
    # null), then the kinds of both ends gathered by event id (the row number) and compared,
    # then the GPU ends that no correlation link has (flags scattered by event id)
    flow_kind, src, dst = (flows.get_column(c) for c in ("flow_kind", "src_event_id", "dst_event_id"))
    both = (flow_kind == "launch") & (src == src) & (dst == dst)
    src, dst = src.filter(both), dst.filter(both)
    if src.len():
        keep = _any_equal(kinds[src], LAUNCH_KINDS) & _any_equal(kinds[dst], _LINK_TARGETS)
        if by_corr.height:
            linked = repeated("", False, pl.Boolean(), events.height).scatter(by_corr.get_column("gpu_event_id"), True)
            keep = keep & ~linked[dst]
        if not keep.all():
            src, dst = src.filter(keep), dst.filter(keep)
    if src.len() == 0:
        return by_corr
    by_flow = pl.DataFrame([src.alias("launch_event_id"), dst.alias("gpu_event_id")])
    by_flow = LINKS.conform(
        by_flow.with_columns(
            pl.lit(None, dtype=pl.Int64).alias("correlation"), pl.lit("flow", dtype=LINK_SOURCE).alias("link_source")
        )
    )
    # a flow's GPU end never has a correlation link: only repeated flow pairs are dropped
    links = pl.concat([by_corr, by_flow])
    return links.unique(["launch_event_id", "gpu_event_id"], keep="first").sort(["gpu_event_id", "launch_event_id"])


#: the keys of the canonical order after the start and the duration (schema.canonical_order)
_ORDER_KEYS = ("kind", "pid", "tid", "device", "stream", "name")
#: the native canonical order takes tables up to this many rows (as the pairings: at 3.2 M
#: rows it was faster than polars, 0.14 against 0.22 s CPU, but the 1.1 GB parse's peak RSS
#: came out 10-50 MB higher in most runs; docs/performance.md, round 8)
_NATIVE_ORDER_MAX_ROWS = 200_000
#: the integer types the native sort reads as they are
_NARROW = (pl.Int64, pl.Int32, pl.UInt32, pl.UInt8)


def _canonical_order(events: pl.DataFrame) -> tuple[pl.Series, pl.Series | None]:
    """:func:`tracekit.schema.canonical_order` of the events, the same permutation, and
    where the native sort made it, its inverse (the event id of each row, as
    :func:`_slices` wants it), else None.

    The native sort (tracekit/native/_flowbind.c, ``order``), where it was built, takes tables of up
    to :data:`_NATIVE_ORDER_MAX_ROWS` rows: a radix sort of the starts, then the rows that
    share a start sorted by every key, in one call instead of some ten polars queries."""
    native = None if events.height > _NATIVE_ORDER_MAX_ROWS else load("flowbind")
    names = events.columns
    if (
        native is None
        or not all(k in names for k in ("start_ns", "dur_ns", *_ORDER_KEYS))
        or ("_order" in names and not _rises(events.get_column("_order")))
    ):
        return canonical_order(events), None
    # (``to_physical`` is a query of its own: only the enums need it)
    keys = [_physical(events.get_column(k)) for k in ("start_ns", "dur_ns", *_ORDER_KEYS)]
    # the start and duration as int64, the other keys also as the narrower integers the
    # native sort reads in place (an Enum's physical codes sort as its categories do)
    columns = [k if k.dtype in (_NARROW if i >= 2 else (pl.Int64,)) else k.cast(pl.Int64) for i, k in enumerate(keys)]
    ordered, inverse = native.order(*columns)
    order: pl.Series = pl.Series(ArrowCapsules(ordered)).cast(pl.get_index_type()).alias("start_ns")
    event_id: pl.Series = pl.Series(ArrowCapsules(inverse))
    return order, event_id


def _physical(column: pl.Series) -> pl.Series:
    """``column``'s physical values: an enum's codes, any other column as it is."""
    return column.to_physical() if isinstance(column.dtype, (pl.Enum, pl.Categorical)) else column


def _rises(position: pl.Series) -> bool:
    """Whether ``position`` has no nulls and never falls (then it breaks no tie)."""
    return position.null_count() == 0 and position.is_sorted()


#: the native pairings (``_flowbind.links`` and ``pair``) take tables up to this many rows:
#: their hash tables are then a few MB and mostly in cache, and they cost a third to a half
#: of polars' several queries; on larger ones polars' partitioned hashing is the faster
#: (measured: 67-138 k rows, native ahead by 1-2 ms; 750 k, polars ahead by 10-30 ms)
_NATIVE_PAIRING_MAX_ROWS = 200_000


def _native_pairing(rows: int) -> Any:
    """The native module for a pairing of ``rows`` rows, or None for the polars path."""
    return None if rows > _NATIVE_PAIRING_MAX_ROWS else load("flowbind")


def _correlation_links(events: pl.DataFrame) -> pl.DataFrame:
    """The links by correlation id: every GPU activity whose id names exactly one launch
    call, in event order (``event_id`` is the row number: the events are in canonical order).

    The native pairing (tracekit/native/_flowbind.c), where it was built, gives the same rows from
    one hash table over the launch calls' ids, in place of the five polars queries below
    (on tables of up to :data:`_NATIVE_PAIRING_MAX_ROWS` events)."""
    native = _native_pairing(events.height)
    if native is not None:
        launch_mask = sum(1 << _KIND_CODES[k] for k in LAUNCH_KINDS)
        target_mask = sum(1 << _KIND_CODES[k] for k in _LINK_TARGETS)
        kind_codes = events.get_column("kind").to_physical()  # (uint8 codes, read as they are)
        ids = events.get_column("correlation").cast(pl.Int64)
        columns = [pl.Series(ArrowCapsules(pair)) for pair in native.links(kind_codes, ids, launch_mask, target_mask)]
        source = repeated("link_source", "correlation", LINK_SOURCE, columns[0].len())
        return pl.DataFrame([*columns, source])
    kind, correlation = pl.col("kind"), pl.col("correlation")
    rows = events.select("event_id", "kind", "correlation")
    # a correlation id must name exactly one launch call to be trusted
    unique_launch = (
        rows.filter(kind.is_in(LAUNCH_KINDS) & correlation.is_not_null())
        .filter(correlation.is_unique())
        .select(pl.col("event_id").alias("launch_event_id"), "correlation")
    )
    gpu = rows.filter(kind.is_in(_LINK_TARGETS) & correlation.is_not_null()).select(
        pl.col("event_id").alias("gpu_event_id"), "correlation"
    )
    # each GPU row meets at most one launch and keeps its (ascending) event order: the
    # result is already sorted by (gpu_event_id, launch_event_id) and has no repeated pair
    return LINKS.conform(
        gpu.join(unique_launch, on="correlation", how="inner", maintain_order="left").with_columns(
            pl.lit("correlation", dtype=LINK_SOURCE).alias("link_source")
        )
    )


def _fill_sync_threads(events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """Sync rows are recorded on the device track; give them the waiting host thread.

    Only the pid/tid columns are rebuilt (a join on the whole table would copy it)."""
    # (whether there is a sync row at all by a comparison on the Series: no query)
    if not (events.get_column("kind") == EventKind.SYNC.value).any():
        return events
    is_sync = pl.col("kind") == EventKind.SYNC.value
    narrow = events.select("event_id", "kind", "pid", "tid")
    host = (
        links.join(narrow.select(pl.col("event_id").alias("launch_event_id"), pl.col("pid").alias("_hp"), pl.col("tid").alias("_ht")), on="launch_event_id")
        .group_by("gpu_event_id")
        .agg(pl.col("_hp").first(), pl.col("_ht").first())
    )
    filled = narrow.join(host, left_on="event_id", right_on="gpu_event_id", how="left", maintain_order="left").select(
        pl.when(is_sync).then(pl.col("_hp")).otherwise(pl.col("pid")).alias("pid"),
        pl.when(is_sync).then(pl.col("_ht")).otherwise(pl.col("tid")).alias("tid"),
    )
    return events.with_columns(filled["pid"], filled["tid"])


def _memory_rows(mem: pl.DataFrame) -> pl.DataFrame:
    """``[memory]`` instants of one chunk in the memory table's columns (base time added later)."""
    # Device Type: 0 = CPU, 1 = CUDA (c10::DeviceType); host memory gets device -1
    device = pl.when(pl.col("mem_device_type") == 0).then(-1).otherwise(pl.col("mem_device_id"))
    return mem.select(
        pl.col("start_ns"),
        pl.col("pid"),
        pl.col("tid"),
        device.cast(pl.Int32, strict=False).alias("device"),
        pl.col("mem_addr").alias("address"),
        pl.col("mem_bytes").alias("bytes"),
        pl.col("mem_total_allocated").alias("total_allocated_bytes"),
        pl.col("mem_total_reserved").alias("total_reserved_bytes"),
    )


def _counters(rows: list[dict[str, Any]], base_ns: int) -> pl.DataFrame:
    if not rows:
        return COUNTERS.empty()
    frame = pl.DataFrame(
        {
            "name": [r["name"] for r in rows],
            "series": [r["series"] for r in rows],
            "pid": [_as_int(r["pid"]) for r in rows],
            "start_ns": _time_series("start_ns", [r["ts"] for r in rows]) + base_ns,
            "value": [r["value"] for r in rows],
        }
    )
    return COUNTERS.conform(frame).sort(["name", "series", "start_ns"])


def _devices(top: dict[str, Any], events: pl.DataFrame) -> pl.DataFrame:
    props = top.get("deviceProperties") or top.get("computeProperties") or []
    rows = []
    amd_runtime = any(k.startswith(("hip_", "roctracer")) for k in top)
    if isinstance(props, list):
        for d in props:
            if not isinstance(d, dict):
                continue
            name = str(d.get("name")) if d.get("name") is not None else None
            rows.append(
                {
                    "device": _as_int(d.get("id")),
                    "name": name,
                    "vendor": _vendor(name, amd_runtime),
                    "total_memory_bytes": _as_int(d.get("totalGlobalMem")),
                    "compute_major": _as_int(d.get("computeMajor", d.get("major"))),
                    "compute_minor": _as_int(d.get("computeMinor", d.get("minor"))),
                    "sm_count": _as_int(d.get("numSms", d.get("multiProcessorCount"))),
                }
            )
    frame = DEVICES.from_columns({k: [r[k] for r in rows] for k in DEVICES.names}) if rows else DEVICES.empty()
    # the distinct devices: from the least and the greatest where they agree (a trace of one
    # device; two reductions), else by a query
    device = events.get_column("device")
    least, greatest = device.min(), device.max()
    if least is None or least == greatest:
        used: list[Any] = [] if least is None else [least]
    else:
        used = events.select(pl.col("device").drop_nulls().unique()).to_series().to_list()
    known = set(frame["device"].to_list())
    missing = [int(d) for d in used if d not in known]
    if missing:
        extra = DEVICES.from_columns(
            {"device": missing, "vendor": ["amd" if amd_runtime else None] * len(missing)}
        )
        frame = pl.concat([frame, extra])
    return frame.sort("device", nulls_last=True)


def _vendor(name: str | None, amd_runtime: bool) -> str | None:
    if amd_runtime:
        return "amd"
    if not name:
        return None
    low = name.lower()
    if any(w in low for w in ("nvidia", "tesla", "quadro", "geforce", "rtx", "a100", "h100", "v100")):
        return "nvidia"
    if any(w in low for w in ("amd", "radeon", "instinct", "mi250", "mi300")):
        return "amd"
    return "other"


def _producer(top: dict[str, Any]) -> str | None:
    parts = []
    for key, label in (
        ("cuda_runtime_version", "CUDA runtime"),
        ("cuda_driver_version", "CUDA driver"),
        ("cupti_version", "CUPTI"),
        ("hip_runtime_version", "HIP runtime"),
        ("roctracer_version", "roctracer"),
    ):
        if top.get(key) is not None:
            parts.append(f"{label} {top[key]}")
    return ", ".join(parts) if parts else None


def _metadata(top: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in top.items():
        if key in ("traceEvents", "deviceProperties", "computeProperties"):
            continue
        text = json.dumps(value, default=str)
        out[key] = value if len(text) <= 4096 else text[:4096] + "…"
    return out
