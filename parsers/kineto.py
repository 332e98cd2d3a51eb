"""PyTorch profiler (Kineto) Chrome traces → canonical tables.

Reads every vintage PyTorch has written since 1.8: the capitalised categories of 1.8–1.11
(``Operator``, ``Runtime``, ``Kernel``, flow ``async``/``async_gpu``, ``computeProperties``),
the activity-type categories of 1.12+ (``cpu_op``, ``cuda_runtime``, ``kernel``, ``ac2g``
flows...), ``cuda_sync`` rows (2.1+), ``baseTimeNanoseconds`` and ns-fraction timestamps
(2.4+), ``distributedInfo``, ROCm (``hip*`` calls, string stream args), Triton
(``cuLaunchKernel``), CUDA-graph launches (one correlation, many kernels), ``[memory]``
instants, counters (``ph: C``), string pids/tids and integers above int64.

How it stays fast and small: the traceEvents array is streamed in chunks of whole events
(:mod:`._jsonarray`).  Each chunk is scanned by the native scanner (:mod:`._kineto_scanner`,
when ``_kineto_scan.c`` was built) straight into typed columns for the fields tracekit uses;
an event it does not model exactly is decoded by msgspec, and without the scanner (or with
``TRACEKIT_PURE_PYTHON=1``) msgspec decodes every chunk (:mod:`._kineto_decode`).  Each chunk
is then cut by destination table (:mod:`._kineto_parts`: timed events already in canonical
columns, flow endpoints, metadata, memory instants), so the wide per-event frame never exists
for the whole trace; what needs the whole trace (label ids and threads, the main process,
flows and launch links, the top-level metadata) is polars work at the end
(:mod:`._kineto_threads`, :mod:`._kineto_events`, :mod:`._kineto_flows`, :mod:`._kineto_meta`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import TraceCorruptError
from tracekit.native import release_free_heap
from tracekit.schema import MEMORY, TraceInfo, TraceTables, canonical_order, finalize_events

from ._jsonarray import ArrayStream, NotATraceArray, iter_event_chunks
from ._kineto_decode import as_int, counter_events, decode_chunk, raw_frame
from ._kineto_events import final_event_columns, plus_base
from ._kineto_fields import COMMON_CATEGORY_NAMES
from ._kineto_flows import event_slices, fill_sync_threads, flows_table, links_table
from ._kineto_meta import counters_table, decode_top_level, devices_table, explain_not_a_trace, producer, trace_metadata
from ._kineto_parts import Parts, concat_parts
from ._kineto_scanner import native_scanner, scan, scanned_frame
from ._kineto_threads import find_main_pid, renumber, threads_of_meta
from ._source import Prefetch, ProgressSink, ReadAhead, check_path, open_stream

__all__ = ["default_chunk_bytes", "native_scanner", "read_kineto"]

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
#: chunk instead of following them
FIRST_CHUNK_BYTES = 64 * 1024
#: what the first read-ahead block holds beyond the first chunk's least size: room for the
#: header before the events (the first chunk takes whatever of the block the header leaves)
_FIRST_BLOCK_MARGIN = 256 * 1024
#: the read-ahead blocks are at most this large (a chunk smaller than that: a chunk)
_BLOCK_BYTES = 8 * 1024 * 1024


#: what the reader's producer thread hands over for a chunk: its frame (or what builds it on
#: the caller's thread), its counter events, and its categories coded by the scanner or None
_Decoded = tuple[pl.DataFrame | Callable[[], pl.DataFrame | None], list[dict[str, Any]], pl.Series | None]


def default_chunk_bytes(file_bytes: int) -> int:
    """The chunk size for a file of ``file_bytes`` on disk: large chunks cost less CPU a byte
    (fewer polars calls), small ones keep a small trace's peak memory low, where the chunks in
    flight are a large part of it (docs/performance.md, Kineto section)."""
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
    parts = Parts()
    counter_rows: list[dict[str, Any]] = []
    decode = _ChunkDecoder(native_scanner())
    try:
        # three threads: the reader (file, gunzip), the chunker and scanner (Prefetch), and
        # this one cutting each scanned chunk by table; chunks arrive in file order
        with Prefetch(partial(_decoded_chunks, p, state, decode, chunk_bytes, progress)) as chunks:
            for item, counters, codes in chunks:
                frame = item if isinstance(item, pl.DataFrame) else item()
                assert frame is not None  # (a chunk without fallback events always has a frame)
                parts.add(frame, codes)
                del item, codes
                counter_rows.extend(counters)
                del frame
        decode.close()
    except NotATraceArray as exc:
        raise explain_not_a_trace(p, exc.head) from None
    except OSError as exc:
        raise TraceCorruptError(f"cannot read the file ({exc})", path=p) from exc

    if progress is not None:
        progress.phase("decoding")
    warnings: list[str] = []
    top = decode_top_level(state, warnings)
    warnings.extend(_reading_warnings(p, state, parts.rows, decode.dropped[0]))
    return _build_tables(p, parts, top, counter_rows, warnings, truncated=state.truncated)


class _ChunkDecoder:
    """One chunk of the events array into its raw frame, on the chunker's thread: through the
    native scanner where it was built and takes the chunk, else through msgspec.

    A call has no side effect but the count of malformed events it skipped (``dropped``): the
    chunker's salvage search may decode a chunk and discard it."""

    def __init__(self, native: Any) -> None:
        self.native = native
        #: this parse's freed column memory, reused by the next chunks' columns (_kineto_scan.c)
        self.pool = native.Pool() if native is not None else None
        #: malformed events skipped so far (a list: the msgspec path counts into it)
        self.dropped = [0]

    def close(self) -> None:
        """The scans are done: what the pool keeps free goes back to the system (blocks still
        held by columns are unmapped when polars releases them)."""
        self.pool = None

    def __call__(self, chunk: bytes | memoryview) -> _Decoded:
        native = self.native
        scanned = scan(native, chunk, self.pool, COMMON_CATEGORY_NAMES) if native is not None else None
        if scanned is not None and not scanned[2]:
            # every event scanned: the frame is built from the scanner's columns (and fixed)
            # by the caller's thread, which waits on this one, the pipeline's slowest stage;
            # here only the ``ph`` column, to look for counter events, and the categories'
            # codes (:meth:`Parts.add`), when the scanner could give them
            rows, columns, _, codes = scanned
            at = next(i for i, column in enumerate(columns) if column[0] == "ph")
            name, kind, nfloat, nlabels, values, labels = columns[at]
            if values is None:  # no event of the chunk has a ph (the scanner left the column out)
                counters = []
            else:
                ph = pl.Series(values)
                columns = [*columns[:at], (name, kind, nfloat, nlabels, ph, labels), *columns[at + 1 :]]
                counters = counter_events(bytes(chunk)) if (ph == "C").any() else []
            return partial(scanned_frame, (rows, columns, ()), None), counters, None if codes is None else pl.Series(codes)
        frame = scanned_frame(scanned[:3], chunk) if scanned is not None else None
        if frame is None:  # not scanned natively (unusual content, invalid JSON): msgspec
            frame = raw_frame(decode_chunk(chunk, self.dropped), self.dropped)
        counters = counter_events(bytes(chunk)) if frame.height and (frame["ph"] == "C").any() else []
        return frame, counters, None


def _decoded_chunks(
    path: Path, state: ArrayStream, decode: _ChunkDecoder, chunk_bytes: int, progress: ProgressSink | None
) -> Iterator[_Decoded]:
    """Every chunk of the events array of ``path``, decoded, in file order (``state`` hears
    the header, the trailer and how the array ended)."""
    # the first block is what the chunker's small first chunk needs (with room for the
    # trace's header), so that the first rows reach this thread after the gunzip and scan
    # of that block instead of half a chunk
    block = min(chunk_bytes, _BLOCK_BYTES)
    first_chunk = min(FIRST_CHUNK_BYTES, chunk_bytes // 2)
    first = min(block, first_chunk + _FIRST_BLOCK_MARGIN)
    with ReadAhead(open_stream(path, progress=progress), block=block, first=first) as stream:
        yield from iter_event_chunks(
            stream, state, decode, chunk_bytes=chunk_bytes, first_bytes=first_chunk  # type: ignore[arg-type]
        )


def _reading_warnings(path: Path, state: ArrayStream, rows: int, dropped: int) -> list[str]:
    """What the reading lost, in words (a truncated or damaged file, malformed events); an
    error where nothing at all could be read."""
    warnings = []
    if state.truncated:
        if rows == 0:
            if state.total_bytes == 0:
                raise TraceCorruptError("the file holds no readable data (" + state.truncation_reason + ")", path=path)
            raise TraceCorruptError(
                f"the trace is truncated before its first complete event ({state.truncation_reason})", path=path
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
    if dropped:
        warnings.append(f"skipped {dropped:,} malformed events (wrong field types)")
    return warnings


def _build_tables(
    path: Path,
    parts: Parts,
    top: dict[str, Any],
    counter_rows: list[dict[str, Any]],
    warnings: list[str],
    *,
    truncated: bool,
) -> TraceTables:
    """The canonical tables from the parts of every chunk and the trace's top level."""
    base_ns = as_int(top.get("baseTimeNanoseconds")) or 0
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    rank = as_int(dist.get("rank")) if dist else None
    if not parts.timed:
        parts.add(raw_frame([]))
    ids = parts.final_label_ids()
    threads = threads_of_meta(concat_parts(parts.meta), ids)
    memory = plus_base(renumber(concat_parts(parts.memory), ids), base_ns)
    memory = MEMORY.conform(memory)
    if memory.height > 1:  # (a sort is a query, even of no rows)
        memory = memory.sort("start_ns", maintain_order=True)
    unknown = parts.unknown_categories()
    if unknown:
        warnings.append(unknown)
    events, flows = _events_and_flows(parts, ids, rank, base_ns)
    links = links_table(events, flows)
    events = fill_sync_threads(events, links)
    first = events["start_ns"].min()
    last = events["end_ns"].max()
    info = TraceInfo(
        path=str(path),
        format="kineto",
        format_version=str(top.get("schemaVersion")) if top.get("schemaVersion") is not None else None,
        producer=producer(top),
        rank=rank,
        world_size=as_int(dist.get("world_size")) if dist else None,
        backend=str(dist.get("backend")) if dist and dist.get("backend") is not None else None,
        ranks=(rank if rank is not None else 0,),
        start_ns=int(first) if isinstance(first, int) else None,
        end_ns=int(last) if isinstance(last, int) else None,
        truncated=truncated,
        warnings=tuple(warnings),
        metadata=trace_metadata(top),
    )
    return TraceTables(
        info=info,
        events=events,
        links=links,
        # (taken by name: a ``drop`` is a query, even of columns that are not there)
        flows=flows[[c for c in flows.columns if c not in ("_src_order", "_dst_order")]],
        devices=devices_table(top, events),
        threads=threads,
        counters=counters_table(counter_rows, base_ns),
        memory=memory,
    )


def _events_and_flows(
    parts: Parts, ids: dict[int, int], rank: int | None, base_ns: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The events table in canonical order, and the flows bound to its event ids (the timed
    and flow parts are emptied)."""
    flow_rows = plus_base(renumber(concat_parts(parts.flows), ids), base_ns)
    main_pid = find_main_pid(renumber(concat_parts(parts.launchers), ids, ("pid",)))
    # the scans' freed buffers off the C heap before the tables are built (and once more
    # below, once the flow rows and the columns the final ones replaced are freed too)
    release_free_heap()
    names, name_ranks = parts.take_names()
    timed = [final_event_columns(parts.take_timed(), ids, main_pid, rank, base_ns, name_ranks)]
    del name_ranks
    # the flows are bound before the canonical sort, to the event ids the sort will give,
    # so their temporaries come and go while only the unsorted events exist
    order = canonical_order(timed[0])
    flows = flows_table(flow_rows, event_slices(timed[0], order))
    del flow_rows
    for helper in ("_track_pid", "_track_tid"):
        timed[0].drop_in_place(helper)
    # the unsorted events are handed over with no other reference left to them, so the
    # canonical sort can free each source column as soon as its sorted copy exists
    release_free_heap()
    events = finalize_events(timed.pop(), names=names, order=order)
    return events, flows
