"""Nsight Systems SQLite exports (``nsys export --type sqlite``) → canonical tables.

Reads exports written by nsys 2020.x–2026.x (export schema 2.x–3.30).  The schema drifts
with every release and ``--lazy`` exports create only non-empty tables, so every table
and column is looked up by name and anything absent reads as null.  Each table is read
with one query; all decoding and joining happens in polars, never row by row in Python.
With the optional ``adbc-driver-sqlite`` (``pip install tracekit-gpu[nsight]``) a query's
result arrives as Arrow columns; a query the Arrow driver cannot answer exactly (damaged
text, a type it rejects) and every query without the package go through :mod:`sqlite3`.

What goes where:

* ``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``_DRIVER`` when an export has it): eventClass 0
  → ``runtime``, 1 → ``driver``; the duplicate ``eventClass = 67`` backtrace rows of
  2022-era exports are dropped; ``_v\\d+`` version suffixes are stripped from names.
* ``_KERNEL``, ``_MEMCPY``, ``_MEMSET`` → GPU rows placed by (device, stream) with the
  launching process's pid and a null tid.
* ``_SYNCHRONIZATION`` → ``sync`` rows on the waiting host thread: pid from globalPid,
  tid from globalTid when present, otherwise from the runtime call with the same
  (pid, correlationId).  The ``4294967295`` "not applicable" stream and event ids are null.
* ``NVTX_EVENTS``: push/pop (59) and start/end (60) ranges → ``annotation`` with the
  domain name from the domain-create rows (75; the default domain reads as null);
  marks (34) → ``instant``; thread-name rows (39) name threads.  Text is
  ``COALESCE(text, StringIds[textId])``.  Ranges that never ended are dropped (warned).
* ``OSRT_API`` → ``os_call``; ``PROFILER_OVERHEAD`` and the profiler-caused rows of
  ``CUPTI_ACTIVITY_KIND_OVERHEAD`` → ``overhead`` (its CUDA-caused rows such as
  "Command Buffer Full" → ``other``).
* Launch links join API calls to GPU rows on **(pid, correlationId)**: correlation ids
  are unique only within a process.

Times: the export's session-relative nanoseconds plus
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` (unless the export was already written with
``--ts-normalize``), so Nsight and Kineto traces share one epoch clock.

Ranks: each process with CUDA or NVTX activity is a rank, numbered by its position in
the sorted list of those pids.  When every such process has named one of its threads
``MPI Rank N`` / ``Rank N`` through NVTX (and the numbers are distinct), those numbers
are used instead.  Rows of other processes (OS calls of helper processes) get rank 0.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import ExternalToolError, TraceCorruptError, TraceFormatError, TraceNotFoundError
from tracekit.schema import (
    DEVICES,
    EVENT_KIND,
    GPU_ACTIVITY_KINDS,
    LAUNCH_KINDS,
    LINKS,
    MEMCPY_KIND,
    MEMORY_KIND,
    SYNC_KIND,
    THREADS,
    EventKind,
    MemcpyKind,
    MemoryKind,
    SyncKind,
    TraceInfo,
    TraceTables,
    finalize_events,
)

from ._source import ProgressSink, check_path

__all__ = ["read_nsight", "read_nsys_rep"]

#: CUPTI's "not applicable" value for 32-bit stream and event ids
_NA_U32 = 4294967295
#: rows fetched per ``fetchmany`` (bounds the Python objects alive at once)
_CHUNK_ROWS = 100_000
#: background threads reading tables through Arrow (each with its own connection)
_PREFETCH_THREADS = 2
#: exports smaller than this are read in the calling thread only
_PREFETCH_MIN_BYTES = 8 << 20
#: a table with at least this many rowids is read in one rowid range per thread
_SPLIT_ROWS = 200_000
#: rows per Arrow batch asked of the ADBC SQLite driver (its default is 1024)
_ARROW_BATCH_ROWS = 1 << 20

_I64 = pl.Int64()
_I32 = pl.Int32()
_STR = pl.String()

# NVTX_EVENTS.eventType codes
_NVTX_MARK = 34
_NVTX_THREAD_NAME = 39
_NVTX_PUSH_POP = 59
_NVTX_START_END = 60
_NVTX_DOMAIN_CREATE = 75
_NVTX_TYPES = (_NVTX_MARK, _NVTX_THREAD_NAME, _NVTX_PUSH_POP, _NVTX_START_END, _NVTX_DOMAIN_CREATE)

# CUPTI_ACTIVITY_KIND_RUNTIME.eventClass codes (ENUM_NSYS_EVENT_CLASS)
_CLASS_RUNTIME = 0
_CLASS_DRIVER = 1
_CLASS_BACKTRACE = 67
# OSRT_API.eventClass codes for the "OS runtime profiling started/finished" markers
_OSRT_MARKERS = (31, 32)

# Built-in decodings, used when an export has no ENUM_* tables (2022.x and older).
# ENUM_CUDA_MEMCPY_OPER: array copies count as device memory for the direction.
_MEMCPY_CODES = {
    0: MemcpyKind.UNKNOWN, 1: MemcpyKind.HTOD, 2: MemcpyKind.DTOH, 3: MemcpyKind.HTOD,
    4: MemcpyKind.DTOH, 5: MemcpyKind.DTOD, 6: MemcpyKind.DTOD, 7: MemcpyKind.DTOD,
    8: MemcpyKind.DTOD, 9: MemcpyKind.HTOH, 10: MemcpyKind.PTOP, 11: MemcpyKind.HTOD,
    12: MemcpyKind.DTOH, 13: MemcpyKind.DTOD,
}  # fmt: skip
_MEMCPY_TOKENS = {
    "UNKNOWN": MemcpyKind.UNKNOWN, "HTOD": MemcpyKind.HTOD, "DTOH": MemcpyKind.DTOH,
    "HTOA": MemcpyKind.HTOD, "ATOH": MemcpyKind.DTOH, "ATOA": MemcpyKind.DTOD,
    "ATOD": MemcpyKind.DTOD, "DTOA": MemcpyKind.DTOD, "DTOD": MemcpyKind.DTOD,
    "HTOH": MemcpyKind.HTOH, "PTOP": MemcpyKind.PTOP,
}  # fmt: skip
# ENUM_CUDA_MEM_KIND
_MEMORY_CODES = {
    0: MemoryKind.PAGEABLE, 1: MemoryKind.PINNED, 2: MemoryKind.DEVICE, 3: MemoryKind.ARRAY,
    4: MemoryKind.MANAGED, 5: MemoryKind.DEVICE, 6: MemoryKind.MANAGED, 7: MemoryKind.UNKNOWN,
}  # fmt: skip
_MEMORY_TOKENS = {
    "PAGEABLE": MemoryKind.PAGEABLE, "PINNED": MemoryKind.PINNED, "DEVICE": MemoryKind.DEVICE,
    "ARRAY": MemoryKind.ARRAY, "MANAGED": MemoryKind.MANAGED, "DEVICE_STATIC": MemoryKind.DEVICE,
    "MANAGED_STATIC": MemoryKind.MANAGED, "UNKNOWN": MemoryKind.UNKNOWN,
}  # fmt: skip
# ENUM_CUPTI_SYNC_TYPE
_SYNC_CODES = {
    1: SyncKind.EVENT_SYNC, 2: SyncKind.STREAM_WAIT_EVENT, 3: SyncKind.STREAM_SYNC, 4: SyncKind.CONTEXT_SYNC,
}  # fmt: skip
_SYNC_TOKENS = {
    "EVENT_SYNCHRONIZE": SyncKind.EVENT_SYNC, "STREAM_WAIT_EVENT": SyncKind.STREAM_WAIT_EVENT,
    "STREAM_SYNCHRONIZE": SyncKind.STREAM_SYNC, "CONTEXT_SYNCHRONIZE": SyncKind.CONTEXT_SYNC,
    "UNKNOWN": SyncKind.UNKNOWN,
}  # fmt: skip
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
# ENUM_CUPTI_OVERHEAD_TYPE: which overhead types the profiler itself causes
_PROFILER_OVERHEAD_CODES = {3: True, 4: True, 5: True}
_OVERHEAD_TOKENS = {"CUPTI_BUFFER_FLUSH": True, "CUPTI_INSTRUMENTATION": True, "CUPTI_RESOURCE": True}

#: NCCL kernel name → collective (ncclKernel_AllReduce_..., ncclDevKernel_SendRecv, ...)
_NCCL_COLLECTIVE = (
    r"^nccl(?:Dev)?Kernel_(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll|Send|Recv)"
)
_COLLECTIVE_NAMES = {
    "AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send_recv", "AllToAll": "all_to_all",
    "Send": "send", "Recv": "recv",
}  # fmt: skip
#: autograd sequence number in emit_nvtx range names ("aten::mm, seq = 12, op_id = 40")
_NVTX_SEQ = r"(?:^|, )(?:stashed )?seq = (\d+)"
#: input shapes in emit_nvtx(record_shapes=True) range names ("..., sizes = [[8, 64], [64, 32]]")
_NVTX_SIZES = r", sizes = (\[(?:[^\[\]]|\[[^\[\]]*\])*\])"
_RANK_THREAD_NAME = r"^(?:MPI |NCCL )?[Rr]ank (\d+)$"

_GPU_LINK_KINDS = [*GPU_ACTIVITY_KINDS, EventKind.SYNC.value]


# ----------------------------------------------------------------------------------------
# entry points


def read_nsight(path: str | Path, *, progress: ProgressSink | None = None) -> TraceTables:
    """Read an Nsight Systems SQLite export into canonical tables.

    Raises:
        TraceNotFoundError: the file does not exist or cannot be read.
        TraceFormatError: the file is SQLite but not an Nsight Systems export.
        TraceCorruptError: the SQLite file is damaged.
    """
    p = check_path(path)
    uri = p.resolve().as_uri() + "?mode=ro&immutable=1"
    if progress is not None:  # SQLite reads the file itself: no byte count, the phase only
        progress.phase("reading")
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:  # pragma: no cover - connect is lazy; failures surface on first query
        raise TraceNotFoundError(f"cannot open SQLite file: {exc}", path=path) from exc
    # text is decoded leniently: a damaged byte in a name must not cost the whole export
    con.text_factory = _lenient_text
    arrow = _open_arrow(uri)
    db: _Db | None = None
    try:
        db = _Db(con, arrow, uri)
        return _Reader(db, str(path), p.stat().st_size).read()
    except sqlite3.DatabaseError as exc:
        raise _database_error(exc, path) from exc
    except UnicodeDecodeError as exc:  # damaged schema text (table or column names)
        raise TraceCorruptError(f"the SQLite schema is damaged ({exc.reason} at byte {exc.start})", path=path) from exc
    finally:
        if db is not None:
            db.close()  # the background reads, their connections, both connections
        else:
            con.close()
            if arrow is not None:
                _close_quietly(arrow)


def read_nsys_rep(path: str | Path, work_dir: str | Path | None = None, *, progress: ProgressSink | None = None) -> TraceTables:
    """Read a binary Nsight Systems report (``.nsys-rep``, ``.qdrep``) through ``nsys export``.

    The report is exported to ``<work_dir or a temporary folder>/<stem>.sqlite`` with
    NVIDIA's ``nsys`` (which must be on PATH) and the export is read with
    :func:`read_nsight`.  Without ``nsys`` an :class:`ExternalToolError` gives the
    commands to run by hand.
    """
    p = check_path(path)
    nsys = shutil.which("nsys")
    if nsys is None:
        out = p.with_name(p.stem + ".sqlite")
        export = shlex.join(["nsys", "export", "--type", "sqlite", "--output", str(out), str(p)])
        raise ExternalToolError(
            f"{p.name} is a binary Nsight Systems report, which only NVIDIA's `nsys` can read, and `nsys` "
            f"is not on PATH. Export it to SQLite, then analyze the export:\n"
            f"    {export}\n"
            f"    tracekit analyze {shlex.quote(str(out))}",
            path=path,
            hint="install Nsight Systems (or run the export where the report was captured) and put `nsys` on PATH",
        )
    if work_dir is not None:
        out_dir = Path(work_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        if progress is not None:
            progress.phase("exporting with nsys")
        return read_nsight(_export(nsys, p, out_dir / (p.stem + ".sqlite"), path), progress=progress)
    with tempfile.TemporaryDirectory(prefix="tracekit-nsys-") as tmp:
        if progress is not None:
            progress.phase("exporting with nsys")
        return read_nsight(_export(nsys, p, Path(tmp) / (p.stem + ".sqlite"), path), progress=progress)


def _export(nsys: str, report: Path, out: Path, shown: str | Path) -> Path:
    if out.exists():
        if out.stat().st_mtime >= report.stat().st_mtime:
            return out  # exported before from this very report
        out.unlink()
    # export beside the final name, then rename: a concurrent run never reads half an export
    partial = out.with_name(f"{out.stem}.{os.getpid()}.partial.sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--output", str(partial), str(report)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ExternalToolError(f"could not run `{shlex.join(cmd)}`: {exc}", path=shown) from exc
    if proc.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        detail = ("; ".join(tail)) or f"exit status {proc.returncode}"
        raise ExternalToolError(f"`{shlex.join(cmd)}` failed: {detail}", path=shown)
    os.replace(partial, out)
    return out


def _database_error(exc: sqlite3.DatabaseError, path: str | Path) -> Exception:
    text = str(exc)
    damaged = ("malformed", "not a database", "disk i/o", "corrupt", "encrypted", "disk image", "short read")
    if not isinstance(exc, sqlite3.OperationalError) or any(w in text.lower() for w in damaged):
        return TraceCorruptError(f"the SQLite database is damaged ({text})", path=path)
    if "unable to open" in text.lower():
        return TraceNotFoundError(f"cannot open SQLite file ({text})", path=path)
    return TraceCorruptError(f"the SQLite export could not be read ({text})", path=path)


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


# ----------------------------------------------------------------------------------------
# SQLite access


#: set to "0" to read every table through Python's sqlite3 (the fallback path)
ARROW_ENV = "TRACEKIT_NSIGHT_ARROW"


def _open_arrow(uri: str) -> Any:
    """A second, read-only connection through ADBC's SQLite driver, which hands query
    results over as Arrow columns (no Python object per value); None when the optional
    ``adbc-driver-sqlite`` package (extra ``tracekit-gpu[nsight]``) is not installed or the
    connection fails: every query then goes through :mod:`sqlite3`."""
    if os.environ.get(ARROW_ENV, "1") == "0":
        return None
    try:
        from adbc_driver_sqlite import dbapi
    except Exception:  # not installed (ImportError), or its native library does not load
        return None
    try:
        return dbapi.connect(uri)
    except Exception:  # any driver failure: the sqlite3 path reads the file
        return None


def _close_quietly(con: Any) -> None:
    # closing a read-only connection has nothing to lose
    with contextlib.suppress(Exception):
        con.close()


@dataclass
class _Db:
    """A read-only export: which tables and columns it has, and bulk reads of them.

    Bulk reads go through the Arrow connection when there is one and fall back, query by
    query, to :mod:`sqlite3` (whose text decoding is lenient) when the Arrow read fails or
    returns text that is not valid UTF-8."""

    con: sqlite3.Connection
    arrow: Any = None
    #: the URI the Arrow connection was opened with: background reads open their own
    uri: str | None = None
    _columns: dict[str, list[str]] = field(default_factory=dict)
    #: queries answered by each path (for tests and benchmarks)
    paths: dict[str, int] = field(default_factory=lambda: {"arrow": 0, "sqlite3": 0})
    #: background Arrow reads started by :meth:`prefetch`, by SQL text
    _pending: dict[str, list[Future[pl.DataFrame | None]]] = field(default_factory=dict)
    _pool: ThreadPoolExecutor | None = None
    #: the Arrow connection of each background thread (one per thread: SQLite
    #: serialises the queries of one connection)
    _local: threading.local = field(default_factory=threading.local)
    _worker_cons: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        rows = self.con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        self.tables = frozenset(str(r[0]) for r in rows)

    def close(self) -> None:
        """Stop the background reads (waiting for running ones) and close every connection."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._pending.clear()
        for con in self._worker_cons:
            _close_quietly(con)
        self._worker_cons.clear()
        if self.arrow is not None:
            _close_quietly(self.arrow)
        self.con.close()

    def prefetch(self, reads: Sequence[tuple[str, Mapping[str, tuple[str, pl.DataType]], Sequence[tuple[str, str]]]]) -> None:
        """Start the Arrow reads of ``reads`` ((table, spec, where) as for :meth:`fetch`) in
        background threads, each with its own read-only connection.  SQLite steps through
        rows and the driver builds Arrow columns without holding the GIL, so the reads run
        beside each other and beside the decoding of the tables already read.  A later
        :meth:`fetch` of the same read takes its result (or, when the Arrow read was not
        exact, reads it through sqlite3 as usual).  Without the Arrow driver this does nothing."""
        if self.arrow is None or self.uri is None or self._pool is not None:
            return
        queries = []
        for table, spec, where in reads:
            plan = self._plan(table, spec, where)
            if plan is not None and plan[0] is not None:
                queries.append((table, plan[0], plan[1], bool([c for c, _ in where if c in self.columns(table)])))
        if not queries:
            return
        self._pool = ThreadPoolExecutor(max_workers=_PREFETCH_THREADS, thread_name_prefix="tracekit-nsight")
        for table, sql, chosen, filtered in queries:
            if sql in self._pending:
                continue
            # a large table is read in rowid ranges, one per thread, so that its read is not
            # one thread's work (the ranges, read in order, give the rows in the full scan's order)
            parts = [sql]
            bounds = self._rowid_bounds(table)
            if bounds is not None and bounds[1] - bounds[0] >= _SPLIT_ROWS:
                lo, hi = bounds
                step = (hi - lo + _PREFETCH_THREADS) // _PREFETCH_THREADS
                join = " AND " if filtered else " WHERE "
                parts = [f"{sql}{join}(rowid >= {a} AND rowid < {min(a + step, hi + 1)})" for a in range(lo, hi + 1, step)]
            self._pending[sql] = [self._pool.submit(self._background_query, part, chosen) for part in parts]

    def _rowid_bounds(self, table: str) -> tuple[int, int] | None:
        """(smallest, largest) rowid of an ordinary rowid table without indexes; None when it
        has no rows, is a WITHOUT ROWID table or a view, has a column that takes the name
        ``rowid``, or has an index (a query could then walk the index, and the whole read's
        row order would not be the rowid order the ranges give)."""
        if {"rowid", "_rowid_", "oid"} & {c.lower() for c in self.columns(table)}:
            return None
        try:
            indexed = self.con.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'index' AND tbl_name = ? LIMIT 1", (table,)
            ).fetchone()
            if indexed is not None:
                return None
            # one aggregate per query: SQLite answers MIN(rowid) or MAX(rowid) alone from the
            # b-tree's ends, but scans every row for both in one SELECT (0.1 s on 1 M rows)
            name = _quote(table)
            row = self.con.execute(f"SELECT (SELECT MIN(rowid) FROM {name}), (SELECT MAX(rowid) FROM {name})").fetchone()
        except sqlite3.Error:
            return None
        if row is None or not isinstance(row[0], int) or not isinstance(row[1], int):
            return None
        return int(row[0]), int(row[1])

    def _background_query(self, sql: str, chosen: list[tuple[str, str, pl.DataType]]) -> pl.DataFrame | None:
        con = getattr(self._local, "con", None)
        if con is None:
            con = _open_arrow(self.uri) if self.uri is not None else None
            if con is None:
                return None
            self._local.con = con
            with self._lock:
                self._worker_cons.append(con)
        return _arrow_frame(con, sql, chosen)

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> list[str]:
        if table not in self._columns:
            rows = self.con.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
            self._columns[table] = [str(r[1]) for r in rows]
        return self._columns[table]

    def fetch(
        self,
        table: str,
        spec: Mapping[str, tuple[str, pl.DataType]],
        where: Sequence[tuple[str, str]] = (),
    ) -> pl.DataFrame:
        """Read ``table`` in one query as a frame with the columns of ``spec``.

        ``spec`` maps output name → (source column, dtype); a source column the table
        lacks (or a table that is absent) reads as nulls.  ``where`` holds (column,
        condition) pairs, applied only when the table has that column.
        """
        schema = pl.Schema({name: dtype for name, (_, dtype) in spec.items()})
        plan = self._plan(table, spec, where)
        if plan is None:
            return pl.DataFrame(schema=schema)
        sql, chosen = plan
        if sql is None:
            (n,) = self.con.execute(f"SELECT COUNT(*) FROM {_quote(table)}").fetchone()
            return pl.DataFrame({name: pl.Series(name, [None] * n, dtype=dtype) for name, dtype in schema.items()})
        frame = self._query(sql, chosen)
        present = {src for _, src, _ in chosen}
        missing = [pl.lit(None, dtype=dtype).alias(name) for name, (src, dtype) in spec.items() if src not in present]
        return frame.with_columns(missing).select(list(spec)) if missing else frame

    def _plan(
        self, table: str, spec: Mapping[str, tuple[str, pl.DataType]], where: Sequence[tuple[str, str]]
    ) -> tuple[str | None, list[tuple[str, str, pl.DataType]]] | None:
        """(the query, its (output name, source column, dtype) columns) for a :meth:`fetch`;
        None when the table is absent, no query when it has none of the columns."""
        if not self.has(table):
            return None
        present = set(self.columns(table))
        chosen = [(name, src, dtype) for name, (src, dtype) in spec.items() if src in present]
        if not chosen:
            return None, chosen
        sql = f"SELECT {', '.join(_quote(src) for _, src, _ in chosen)} FROM {_quote(table)}"
        conditions = [cond for col, cond in where if col in present]
        if conditions:
            sql += " WHERE " + " AND ".join(f"({c})" for c in conditions)
        return sql, chosen

    def _query(self, sql: str, chosen: list[tuple[str, str, pl.DataType]]) -> pl.DataFrame:
        pending = self._pending.pop(sql, None)
        if pending is not None:
            results = [future.result() for future in pending]
            frames = [result for result in results if result is not None]
            if len(frames) == len(results):
                self.paths["arrow"] += 1
                return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")
        elif self.arrow is not None:
            frame = _arrow_frame(self.arrow, sql, chosen)
            if frame is not None:
                self.paths["arrow"] += 1
                return frame
        self.paths["sqlite3"] += 1
        cursor = self.con.execute(sql)
        parts = []
        while rows := cursor.fetchmany(_CHUNK_ROWS):
            parts.append(
                pl.DataFrame(
                    [
                        pl.Series(name, [r[i] for r in rows], dtype=dtype, strict=False)
                        for i, (name, _, dtype) in enumerate(chosen)
                    ]
                )
            )
        if not parts:
            return pl.DataFrame(schema={name: dtype for name, _, dtype in chosen})
        return parts[0] if len(parts) == 1 else pl.concat(parts, rechunk=True)

    def key_values(self, table: str) -> dict[str, str]:
        """A (name, value) table such as META_DATA_EXPORT as a dict."""
        if not self.has(table) or not {"name", "value"} <= set(self.columns(table)):
            return {}
        rows = self.con.execute(f"SELECT name, value FROM {_quote(table)}").fetchall()
        return {str(k): str(v) for k, v in rows if k is not None and v is not None}

    def enum(self, table: str) -> dict[int, str]:
        """An ENUM_* table (id, name, label) as id → name; empty when absent."""
        if not self.has(table) or not {"id", "name"} <= set(self.columns(table)):
            return {}
        rows = self.con.execute(f"SELECT id, name FROM {_quote(table)}").fetchall()
        return {int(i): str(n) for i, n in rows if isinstance(i, int) and n is not None}

    def scalar(self, table: str, column: str) -> object:
        if not self.has(table) or column not in self.columns(table):
            return None
        row = self.con.execute(f"SELECT {_quote(column)} FROM {_quote(table)} LIMIT 1").fetchone()
        return None if row is None else row[0]


def _arrow_frame(con: Any, sql: str, chosen: list[tuple[str, str, pl.DataType]]) -> pl.DataFrame | None:
    """The query's result as polars columns through Arrow, or None (use sqlite3)."""
    import pyarrow as pa

    try:
        cursor = con.cursor()
        try:
            # large batches: fewer Arrow chunks to stitch together (10-15% of a large read),
            # and the driver infers each column's type from more rows
            with contextlib.suppress(Exception):
                cursor.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(_ARROW_BATCH_ROWS)})
            cursor.execute(sql)
            table = cursor.fetch_arrow_table()
        finally:
            cursor.close()
        # SQLite stores whatever bytes it was given; the Arrow driver does not check
        # them, and damaged text must be replaced, not passed on as invalid strings
        if any(pa.types.is_string(t) or pa.types.is_large_string(t) for t in table.schema.types):
            table.validate(full=True)
        if table.num_columns != len(chosen):
            return None
        frame = pl.from_arrow(table.rename_columns([name for name, _, _ in chosen]), rechunk=True)
        assert isinstance(frame, pl.DataFrame)
        return frame.select(pl.col(name).cast(dtype, strict=False) for name, _, dtype in chosen)
    except Exception:  # a type the driver rejects, mixed column types, damaged text...
        return None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _decode_enum(
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


def _map_codes(expr: pl.Expr, mapping: Mapping[int, object], unknown: str) -> pl.Expr:
    """Vectorised code → text lookup; null stays null, unlisted codes read ``unknown``."""
    values = {k: (v.value if isinstance(v, (MemcpyKind, MemoryKind, SyncKind)) else str(v)) for k, v in mapping.items()}
    return pl.when(expr.is_null()).then(None).otherwise(expr.replace_strict(values, default=unknown, return_dtype=_STR))


def _pid(col: str) -> pl.Expr:
    """PID from a serialized globalTid/globalPid (hw:8 | vm:8 | pid:24 | tid:24)."""
    return (pl.col(col) & 0xFFFFFF000000) // 0x1000000


def _tid(col: str) -> pl.Expr:
    return pl.col(col) & 0xFFFFFF


# ----------------------------------------------------------------------------------------
# the reader


def _spec(**columns: tuple[str, pl.DataType]) -> dict[str, tuple[str, pl.DataType]]:
    return dict(columns)


_GPU_PREFIX = _spec(
    start=("start", _I64),
    end=("end", _I64),
    device=("deviceId", _I64),
    stream=("streamId", _I64),
    correlation=("correlationId", _I64),
    gpid=("globalPid", _I64),
)
_STRINGS_SPEC = _spec(id=("id", _I64), value=("value", _STR))
_API_SPEC = _spec(
    start=("start", _I64),
    end=("end", _I64),
    event_class=("eventClass", _I64),
    gtid=("globalTid", _I64),
    correlation=("correlationId", _I64),
    name_id=("nameId", _I64),
)
_API_WHERE = (("eventClass", f'"eventClass" IS NOT {_CLASS_BACKTRACE}'),)
_API_TABLES = (("CUPTI_ACTIVITY_KIND_RUNTIME", None), ("CUPTI_ACTIVITY_KIND_DRIVER", EventKind.DRIVER))
_KERNEL_SPEC = _GPU_PREFIX | _spec(
    demangled=("demangledName", _I64),
    short=("shortName", _I64),
    grid_x=("gridX", _I64),
    grid_y=("gridY", _I64),
    grid_z=("gridZ", _I64),
    block_x=("blockX", _I64),
    block_y=("blockY", _I64),
    block_z=("blockZ", _I64),
    registers_per_thread=("registersPerThread", _I64),
    static_smem=("staticSharedMemory", _I64),
    dynamic_smem=("dynamicSharedMemory", _I64),
)
_MEMCPY_SPEC = _GPU_PREFIX | _spec(
    bytes=("bytes", _I64), copy_kind=("copyKind", _I64), src_kind=("srcKind", _I64), dst_kind=("dstKind", _I64)
)
_MEMSET_SPEC = _GPU_PREFIX | _spec(bytes=("bytes", _I64), mem_kind=("memKind", _I64))
_SYNC_SPEC = _GPU_PREFIX | _spec(
    sync_type=("syncType", _I64),
    old_sync_type=("deprecatedSyncType", _I64),
    event_sync_id=("eventSyncId", _I64),
    gtid=("globalTid", _I64),
)
_NVTX_SPEC = _spec(
    start=("start", _I64),
    end=("end", _I64),
    event_type=("eventType", _I64),
    text=("text", _STR),
    text_id=("textId", _I64),
    gtid=("globalTid", _I64),
    domain_id=("domainId", _I64),
)
_NVTX_WHERE = (("eventType", f'"eventType" IN ({", ".join(str(t) for t in _NVTX_TYPES)})'),)
_OSRT_SPEC = _spec(
    start=("start", _I64),
    end=("end", _I64),
    event_class=("eventClass", _I64),
    gtid=("globalTid", _I64),
    name_id=("nameId", _I64),
)
_PROFILER_OVERHEAD_SPEC = _spec(
    start=("start", _I64), end=("end", _I64), gtid=("globalTid", _I64), name_id=("nameId", _I64)
)
_CUPTI_OVERHEAD_SPEC = _spec(
    start=("start", _I64),
    end=("end", _I64),
    gtid=("globalTid", _I64),
    correlation=("correlationId", _I64),
    name_id=("nameId", _I64),
    overhead_type=("overheadType", _I64),
)
#: the bulk reads, started together in background threads (see _Db.prefetch), in the order
#: the reader decodes them, so that the first table it needs is the first one read
_BULK_READS: tuple[tuple[str, Mapping[str, tuple[str, pl.DataType]], Sequence[tuple[str, str]]], ...] = (
    ("StringIds", _STRINGS_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", _API_SPEC, _API_WHERE),
    ("CUPTI_ACTIVITY_KIND_DRIVER", _API_SPEC, _API_WHERE),
    ("NVTX_EVENTS", _NVTX_SPEC, _NVTX_WHERE),
    ("CUPTI_ACTIVITY_KIND_KERNEL", _KERNEL_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", _MEMCPY_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_MEMSET", _MEMSET_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", _SYNC_SPEC, ()),
    ("OSRT_API", _OSRT_SPEC, ()),
    ("PROFILER_OVERHEAD", _PROFILER_OVERHEAD_SPEC, ()),
    ("CUPTI_ACTIVITY_KIND_OVERHEAD", _CUPTI_OVERHEAD_SPEC, ()),
)


class _Reader:
    def __init__(self, db: _Db, shown_path: str, size: int = 0) -> None:
        self.db = db
        self.size = size
        self.shown_path = shown_path
        self.warnings: list[str] = []
        self.read_tables: list[str] = []

    # -- orchestration ------------------------------------------------------------------

    def read(self) -> TraceTables:
        db = self.db
        if not any(t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_")) or t == "StringIds" for t in db.tables):
            raise TraceFormatError(
                "SQLite database without Nsight Systems tables (no CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS or StringIds)",
                path=self.shown_path,
                hint="export an Nsight Systems report with `nsys export --type sqlite --output report.sqlite report.nsys-rep`",
            )
        export = db.key_values("META_DATA_EXPORT") or db.key_values("EXPORT_META_DATA")
        utc = db.scalar("TARGET_INFO_SESSION_START_TIME", "utcEpochNs")
        # exported with --ts-normalize: times are already UTC-based
        normalized = any(
            export.get(k, "").lower() == "true" for k in ("EXPORT_PARAM_TIME_NORMALIZE", "EXPORT_TIME_NORMALIZE")
        )
        offset = int(utc) if isinstance(utc, int) and not normalized else 0
        if self.size >= _PREFETCH_MIN_BYTES:  # below, the threads and connections cost more than they save
            db.prefetch(_BULK_READS)
        self.strings = db.fetch("StringIds", _STRINGS_SPEC).unique("id", keep="first")

        events, nvtx_threads = self._events()
        # column by column: ``with_columns`` would first copy the whole concatenation
        # into one chunk per column, which the canonical sort does anyway
        if offset:
            events.replace_column(events.get_column_index("start_ns"), events.get_column("start_ns") + offset)

        ranks, rank_source = self._ranks(events, nvtx_threads)
        if ranks:
            rank = events.get_column("pid").replace_strict(ranks, default=0, return_dtype=_I32).fill_null(0)
        else:
            rank = pl.repeat(0, events.height, dtype=_I32, eager=True)
        events = events.hstack([rank.alias("rank")]).with_row_index("_order")
        events = finalize_events(events)
        links = self._links(events)
        self._orphan_warning(events, links)

        devices = self._devices(events)
        threads = self._threads(events, nvtx_threads)
        rank_values = tuple(sorted(set(ranks.values()))) or (0,)
        start = events["start_ns"].min() if events.height else None
        end = events["end_ns"].max() if events.height else None
        metadata: dict[str, object] = {
            "export": export,
            "clock": "utc_epoch" if (offset or normalized) else "session",
            "session_start_utc_ns": utc if isinstance(utc, int) else None,
            "rank_pids": {str(r): pid for pid, r in sorted(ranks.items(), key=lambda kv: kv[1])},
            "rank_source": rank_source,
            "tables": sorted(self.read_tables),
        }
        if not offset and not normalized:
            self.warnings.append(
                "the export has no TARGET_INFO_SESSION_START_TIME: times are session-relative and cannot be "
                "aligned with other traces"
            )
        product = export.get("EXPORT_PRODUCT_VERSION")
        info = TraceInfo(
            path=self.shown_path,
            format="nsys",
            format_version=export.get("EXPORT_SCHEMA_VERSION"),
            producer=f"nsys {product}" if product else None,
            rank=rank_values[0] if len(rank_values) == 1 else None,
            ranks=rank_values,
            start_ns=int(start) if isinstance(start, int) else None,
            end_ns=int(end) if isinstance(end, int) else None,
            warnings=tuple(self.warnings),
            metadata=metadata,
        )
        return TraceTables(info=info, events=events, links=links, devices=devices, threads=threads)

    def _events(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Every event table as one frame (session times), and the NVTX thread names.

        Built here so that the per-table frames are released before the big sort.
        """
        runtime = self._runtime()
        nvtx, nvtx_threads = self._nvtx()
        sources = [
            runtime,
            self._kernels(),
            self._memcpy(),
            self._memset(),
            self._sync(runtime),
            nvtx,
            self._osrt(),
            self._profiler_overhead(),
            self._cupti_overhead(),
        ]
        frames = [f for f in sources if f.height]
        if not frames:
            return pl.DataFrame(
                schema={"kind": EVENT_KIND, "start_ns": _I64, "dur_ns": _I64, "pid": _I64}
            ), nvtx_threads
        return pl.concat(frames, how="diagonal_relaxed"), nvtx_threads

    def _fetch(
        self, table: str, spec: Mapping[str, tuple[str, pl.DataType]], where: Sequence[tuple[str, str]] = ()
    ) -> pl.DataFrame:
        if self.db.has(table):
            self.read_tables.append(table)
        return self.db.fetch(table, spec, where)

    def _name(self, frame: pl.DataFrame, id_col: str, out: str) -> pl.DataFrame:
        """Resolve a StringIds reference column into ``out``."""
        lookup = self.strings.rename({"id": id_col, "value": out})
        return frame.join(lookup, on=id_col, how="left", maintain_order="left")

    def _intervals(self, frame: pl.DataFrame, what: str) -> pl.DataFrame:
        """Drop rows without a start or end (warned), add start_ns/dur_ns."""
        bad = frame.filter(pl.col("start").is_null() | pl.col("end").is_null()).height
        if bad:
            self.warnings.append(f"{bad:,} {what} rows without a start or end time were dropped")
            frame = frame.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())
        return frame.with_columns(
            pl.col("start").alias("start_ns"), (pl.col("end") - pl.col("start")).alias("dur_ns")
        ).drop("start", "end")

    # -- CPU API calls -------------------------------------------------------------------

    def _runtime(self) -> pl.DataFrame:
        parts = []
        # the version suffix is stripped once per distinct string, not once per call
        names = self.strings.with_columns(pl.col("value").str.replace(r"_v\d+$", ""))
        for table, default in _API_TABLES:
            frame = self._fetch(table, _API_SPEC, _API_WHERE)
            if not frame.height:
                continue
            if default is None:
                kind = (
                    pl.when(pl.col("event_class") == _CLASS_DRIVER)
                    .then(pl.lit(EventKind.DRIVER.value))
                    .when((pl.col("event_class") == _CLASS_RUNTIME) | pl.col("event_class").is_null())
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
        frame = self._intervals(frame, "CUDA API")
        return frame.select(
            pl.col("kind").cast(EVENT_KIND),
            "name",
            _pid("gtid").alias("pid"),
            _tid("gtid").alias("tid"),
            "start_ns",
            "dur_ns",
            "correlation",
        )

    # -- GPU activity --------------------------------------------------------------------

    def _gpu_common(self) -> list[pl.Expr | str]:
        return [
            _pid("gpid").alias("pid"),
            pl.lit(None, dtype=_I64).alias("tid"),
            pl.col("device").cast(_I32, strict=False),
            "stream",
            "start_ns",
            "dur_ns",
            "correlation",
        ]

    def _kernels(self) -> pl.DataFrame:
        frame = self._fetch("CUPTI_ACTIVITY_KIND_KERNEL", _KERNEL_SPEC)
        if not frame.height:
            return pl.DataFrame()
        frame = self._name(self._name(frame, "demangled", "demangled_name"), "short", "short_name")
        frame = self._intervals(frame, "kernel")
        name = pl.coalesce("demangled_name", "short_name")
        collective = name.str.extract(_NCCL_COLLECTIVE, 1).replace_strict(
            _COLLECTIVE_NAMES, default=None, return_dtype=_STR
        )
        return frame.select(
            pl.lit(EventKind.KERNEL.value, dtype=EVENT_KIND).alias("kind"),
            name.alias("name"),
            *self._gpu_common(),
            (pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z")).alias("grid_blocks"),
            (pl.col("block_x") * pl.col("block_y") * pl.col("block_z")).alias("block_threads"),
            pl.col("registers_per_thread").cast(_I32, strict=False),
            pl.when(pl.col("static_smem").is_null() & pl.col("dynamic_smem").is_null())
            .then(None)
            .otherwise(pl.col("static_smem").fill_null(0) + pl.col("dynamic_smem").fill_null(0))
            .alias("shared_memory_bytes"),
            collective.alias("collective"),
        )

    def _memcpy(self) -> pl.DataFrame:
        frame = self._fetch("CUPTI_ACTIVITY_KIND_MEMCPY", _MEMCPY_SPEC)
        if not frame.height:
            return pl.DataFrame()
        frame = self._intervals(frame, "memcpy")
        copy_codes = _decode_enum(
            self.db.enum("ENUM_CUDA_MEMCPY_OPER"), "KIND_", _MEMCPY_TOKENS, _MEMCPY_CODES, MemcpyKind.UNKNOWN
        )
        memory = self._memory_codes()
        kind = _map_codes(pl.col("copy_kind"), copy_codes, MemcpyKind.UNKNOWN.value)
        return frame.select(
            pl.lit(EventKind.MEMCPY.value, dtype=EVENT_KIND).alias("kind"),
            pl.concat_str(pl.lit("[CUDA memcpy "), kind.fill_null(MemcpyKind.UNKNOWN.value), pl.lit("]")).alias("name"),
            *self._gpu_common(),
            "bytes",
            # typed here, on this table's rows, rather than on the whole events table
            kind.cast(MEMCPY_KIND).alias("memcpy_kind"),
            _map_codes(pl.col("src_kind"), memory, MemoryKind.UNKNOWN.value).cast(MEMORY_KIND).alias("src_memory"),
            _map_codes(pl.col("dst_kind"), memory, MemoryKind.UNKNOWN.value).cast(MEMORY_KIND).alias("dst_memory"),
        )

    def _memory_codes(self) -> dict[int, object]:
        return _decode_enum(
            self.db.enum("ENUM_CUDA_MEM_KIND"), "MEMORY_KIND_", _MEMORY_TOKENS, _MEMORY_CODES, MemoryKind.UNKNOWN
        )

    def _memset(self) -> pl.DataFrame:
        frame = self._fetch("CUPTI_ACTIVITY_KIND_MEMSET", _MEMSET_SPEC)
        if not frame.height:
            return pl.DataFrame()
        frame = self._intervals(frame, "memset")
        return frame.select(
            pl.lit(EventKind.MEMSET.value, dtype=EVENT_KIND).alias("kind"),
            pl.lit("[CUDA memset]").alias("name"),
            *self._gpu_common(),
            "bytes",
            _map_codes(pl.col("mem_kind"), self._memory_codes(), MemoryKind.UNKNOWN.value)
            .cast(MEMORY_KIND)
            .alias("dst_memory"),
        )

    def _sync(self, runtime: pl.DataFrame) -> pl.DataFrame:
        frame = self._fetch("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", _SYNC_SPEC)
        if not frame.height:
            return pl.DataFrame()
        frame = self._intervals(frame, "synchronization")
        codes = _decode_enum(self.db.enum("ENUM_CUPTI_SYNC_TYPE"), "TYPE_", _SYNC_TOKENS, _SYNC_CODES, SyncKind.UNKNOWN)
        sync_kind = _map_codes(pl.coalesce("sync_type", "old_sync_type"), codes, SyncKind.UNKNOWN.value).fill_null(
            SyncKind.UNKNOWN.value
        )
        stream = pl.when(pl.col("stream") == _NA_U32).then(None).otherwise(pl.col("stream"))
        frame = frame.with_columns(
            pl.coalesce(_pid("gtid"), _pid("gpid")).alias("pid"),
            _tid("gtid").alias("tid"),
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
            by_api = pl.lit(None, dtype=_STR)
            for pattern, kind in _SYNC_APIS:
                by_api = pl.when(pl.col("caller").str.contains(pattern)).then(pl.lit(kind.value)).otherwise(by_api)
            frame = frame.with_columns(pl.coalesce("tid", "caller_tid").alias("tid"), by_api.alias("api_kind"))
            overridden = frame.filter(
                pl.col("api_kind").is_not_null() & (pl.col("api_kind") != pl.col("sync_kind"))
            ).height
            if overridden:
                self.warnings.append(
                    f"{overridden:,} synchronization rows record a syncType that contradicts their API call "
                    "(e.g. cudaDeviceSynchronize as an event sync); the API call's meaning was used"
                )
            frame = frame.with_columns(pl.coalesce("api_kind", "sync_kind").alias("sync_kind"))
        frame = frame.with_columns(self._waited_event(frame).alias("wait_event_correlation"))
        return frame.select(
            pl.lit(EventKind.SYNC.value, dtype=EVENT_KIND).alias("kind"),
            pl.col("sync_kind").replace_strict(_SYNC_NAMES, return_dtype=_STR).alias("name"),
            "pid",
            "tid",
            pl.col("device").cast(_I32, strict=False),
            "stream",
            "start_ns",
            "dur_ns",
            "correlation",
            pl.col("sync_kind").cast(SYNC_KIND),
            pl.col("stream").alias("wait_stream"),
            "wait_event_correlation",
        )

    def _waited_event(self, frame: pl.DataFrame) -> pl.Series:
        """Correlation id of the cudaEventRecord each sync row waits on (CUDA_EVENT.eventSyncId)."""
        none = pl.Series("wait_event_correlation", [None] * frame.height, dtype=_I64)
        if frame["event_sync_id"].null_count() == frame.height:
            return none
        records = self._fetch(
            "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
            _spec(gpid=("globalPid", _I64), event_sync_id=("eventSyncId", _I64), record=("correlationId", _I64)),
        )
        if not records.height:
            return none
        records = (
            records.filter(pl.col("event_sync_id").is_not_null())
            .select(_pid("gpid").alias("pid"), "event_sync_id", "record")
            .unique(["pid", "event_sync_id"], keep="last")
        )
        joined = frame.select("pid", "event_sync_id").join(
            records, on=["pid", "event_sync_id"], how="left", maintain_order="left"
        )
        return joined["record"].alias("wait_event_correlation")

    # -- NVTX ----------------------------------------------------------------------------

    def _nvtx(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(annotation and mark events, NVTX thread names as pid/tid/thread_name)."""
        frame = self._fetch("NVTX_EVENTS", _NVTX_SPEC, _NVTX_WHERE)
        empty_threads = pl.DataFrame(schema={"pid": _I64, "tid": _I64, "thread_name": _STR})
        if not frame.height:
            return pl.DataFrame(), empty_threads
        frame = self._name(frame, "text_id", "registered").with_columns(
            pl.coalesce("text", "registered").alias("text"), _pid("gtid").alias("pid"), _tid("gtid").alias("tid")
        )
        # Domain names: from the creating process first (domain ids are handed out per
        # process), else from any process that created that id.
        created = frame.filter((pl.col("event_type") == _NVTX_DOMAIN_CREATE) & pl.col("domain_id").is_not_null())
        own_domains = created.select("pid", "domain_id", pl.col("text").alias("own_domain")).unique(
            ["pid", "domain_id"], keep="last", maintain_order=True
        )
        any_domains = created.select("domain_id", pl.col("text").alias("any_domain")).unique(
            "domain_id", keep="last", maintain_order=True
        )
        threads = (
            frame.filter((pl.col("event_type") == _NVTX_THREAD_NAME) & pl.col("text").is_not_null())
            .select("pid", "tid", pl.col("text").alias("thread_name"))
            .unique(["pid", "tid"], keep="last", maintain_order=True)
        )
        is_range = pl.col("event_type").is_in([_NVTX_PUSH_POP, _NVTX_START_END])
        open_ranges = frame.select((is_range & pl.col("end").is_null()).sum()).item()
        if open_ranges:
            self.warnings.append(f"{open_ranges:,} NVTX ranges never ended within the capture and were dropped")
        # ranges and marks in one pass, in file order (a range and a mark never tie in the
        # canonical sort: their kinds differ)
        is_mark = pl.col("event_type") == _NVTX_MARK
        events = frame.filter(
            pl.col("start").is_not_null() & ((is_range & pl.col("end").is_not_null()) | is_mark)
        ).with_columns(
            pl.when(is_mark).then(pl.lit(EventKind.INSTANT.value)).otherwise(pl.lit(EventKind.ANNOTATION.value))
            .cast(EVENT_KIND).alias("kind"),
            pl.when(is_mark).then(pl.lit(0, dtype=_I64)).otherwise(pl.col("end") - pl.col("start")).alias("dur_ns"),
        )
        del frame
        named = pl.col("domain_id").fill_null(0) != 0
        if created.height and events.select(named.any()).item():
            events = events.join(own_domains, on=["pid", "domain_id"], how="left", maintain_order="left").join(
                any_domains, on="domain_id", how="left", maintain_order="left"
            )
            domain = pl.when(named).then(pl.coalesce("own_domain", "any_domain")).otherwise(None)
        else:  # the default domain only (or no domain was ever named): null throughout
            domain = pl.lit(None, dtype=_STR)
        text = pl.col("text")
        # the emit_nvtx fields are looked for only when some range names carry them
        has_seq, has_sizes = events.select(
            text.str.contains("seq = ", literal=True).any().alias("seq"),
            text.str.contains(", sizes = ", literal=True).any().alias("sizes"),
        ).row(0)
        return (
            events.select(
                "kind",
                text.alias("name"),
                "pid",
                "tid",
                pl.col("start").alias("start_ns"),
                "dur_ns",
                (text.str.extract(_NVTX_SEQ, 1).cast(_I64, strict=False) if has_seq else pl.lit(None, dtype=_I64))
                .alias("sequence_nr"),
                (text.str.extract(_NVTX_SIZES, 1) if has_sizes else pl.lit(None, dtype=_STR)).alias("input_dims"),
                domain.alias("domain"),
            ),
            threads,
        )

    # -- OS runtime and overhead ---------------------------------------------------------

    def _cpu_rows(self, frame: pl.DataFrame, kind: pl.Expr, what: str) -> pl.DataFrame:
        frame = self._intervals(self._name(frame, "name_id", "name"), what)
        return frame.select(
            kind.cast(EVENT_KIND).alias("kind"),
            "name",
            _pid("gtid").alias("pid"),
            _tid("gtid").alias("tid"),
            "start_ns",
            "dur_ns",
            *([pl.col("correlation")] if "correlation" in frame.columns else []),
        )

    def _osrt(self) -> pl.DataFrame:
        frame = self._fetch("OSRT_API", _OSRT_SPEC)
        if not frame.height:
            return pl.DataFrame()
        kind = (
            pl.when(pl.col("event_class").is_in(_OSRT_MARKERS))
            .then(pl.lit(EventKind.INSTANT.value))
            .otherwise(pl.lit(EventKind.OS_CALL.value))
        )
        return self._cpu_rows(frame, kind, "OS runtime")

    def _profiler_overhead(self) -> pl.DataFrame:
        frame = self._fetch("PROFILER_OVERHEAD", _PROFILER_OVERHEAD_SPEC)
        if not frame.height:
            return pl.DataFrame()
        return self._cpu_rows(frame, pl.lit(EventKind.OVERHEAD.value), "profiler overhead")

    def _cupti_overhead(self) -> pl.DataFrame:
        frame = self._fetch("CUPTI_ACTIVITY_KIND_OVERHEAD", _CUPTI_OVERHEAD_SPEC)
        if not frame.height:
            return pl.DataFrame()
        by_profiler = _decode_enum(
            self.db.enum("ENUM_CUPTI_OVERHEAD_TYPE"), "OVERHEAD_", _OVERHEAD_TOKENS, _PROFILER_OVERHEAD_CODES, False
        )
        profiler = [code for code, is_profiler in by_profiler.items() if is_profiler]
        kind = (
            pl.when(pl.col("overhead_type").is_in(profiler))
            .then(pl.lit(EventKind.OVERHEAD.value))
            .otherwise(pl.lit(EventKind.OTHER.value))
        )
        return self._cpu_rows(frame, kind, "CUPTI overhead")

    # -- derived tables ------------------------------------------------------------------

    def _ranks(self, events: pl.DataFrame, nvtx_threads: pl.DataFrame) -> tuple[dict[int, int], str]:
        """pid → rank for the processes with CUDA or NVTX activity, and how it was decided."""
        if not events.height:
            return {}, "none"
        active_kinds = [*LAUNCH_KINDS, *_GPU_LINK_KINDS, EventKind.ANNOTATION.value, EventKind.INSTANT.value]
        # Series operations: a query on ``events`` (many chunks, one per source table) would
        # first copy every column of it into one chunk
        pid = events.get_column("pid")
        active = pid.filter(events.get_column("kind").is_in(active_kinds) & pid.is_not_null()).unique().sort().to_list()
        if not active:
            return {}, "none"
        named = (
            nvtx_threads.with_columns(pl.col("thread_name").str.extract(_RANK_THREAD_NAME, 1).cast(_I64).alias("r"))
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

    def _links(self, events: pl.DataFrame) -> pl.DataFrame:
        keyed = events.select("event_id", "kind", "pid", "correlation").filter(
            pl.col("correlation").is_not_null() & pl.col("pid").is_not_null()
        )
        launches = keyed.filter(pl.col("kind").is_in(LAUNCH_KINDS)).select(
            "pid", "correlation", pl.col("event_id").alias("launch_event_id")
        )
        targets = keyed.filter(pl.col("kind").is_in(_GPU_LINK_KINDS)).select(
            "pid", "correlation", pl.col("event_id").alias("gpu_event_id")
        )
        links = launches.join(targets, on=["pid", "correlation"], how="inner").with_columns(
            pl.lit("correlation").alias("link_source")
        )
        return LINKS.conform(links.sort("gpu_event_id", "launch_event_id"))

    def _orphan_warning(self, events: pl.DataFrame, links: pl.DataFrame) -> None:
        gpu = events.select("event_id", "kind").filter(
            pl.col("kind").is_in(GPU_ACTIVITY_KINDS)
        )
        if not gpu.height:
            return
        linked = gpu.join(links.select(pl.col("gpu_event_id").alias("event_id")).unique(), on="event_id", how="semi")
        orphans = gpu.height - linked.height
        if orphans:
            self.warnings.append(
                f"{orphans:,} of {gpu.height:,} GPU kernels/copies/memsets have no launching API call in the export "
                "(a time-sliced export or API calls not traced)"
            )

    def _devices(self, events: pl.DataFrame) -> pl.DataFrame:
        spec = _spec(
            device=("id", _I64),
            name=("name", _STR),
            total_memory_bytes=("totalMemory", _I64),
            compute_major=("computeMajor", _I64),
            compute_minor=("computeMinor", _I64),
            sm_count=("smCount", _I64),
        )
        described = self._fetch("TARGET_INFO_GPU", spec).filter(pl.col("device").is_not_null())
        described = described.unique("device", keep="first", maintain_order=True).with_columns(
            pl.lit("nvidia").alias("vendor")
        )
        seen = (
            events.select("device")
            .filter(pl.col("device").is_not_null())
            .select(pl.col("device").cast(_I64).unique())
            .join(described.select("device"), on="device", how="anti")
            .with_columns(pl.lit("nvidia").alias("vendor"))
        )
        frame = pl.concat([described, seen], how="diagonal_relaxed").sort("device")
        return DEVICES.conform(frame)

    def _threads(self, events: pl.DataFrame, nvtx_threads: pl.DataFrame) -> pl.DataFrame:
        names = self._fetch(
            "ThreadNames", _spec(name_id=("nameId", _I64), priority=("priority", _I64), gtid=("globalTid", _I64))
        )
        os_threads = (
            self._name(names, "name_id", "os_name")
            .filter(pl.col("gtid").is_not_null())
            .select(_pid("gtid").alias("pid"), _tid("gtid").alias("tid"), "os_name", "priority")
            .sort("priority", descending=True, nulls_last=True, maintain_order=True)
            .unique(["pid", "tid"], keep="first", maintain_order=True)
            .drop("priority")
        )
        threads = os_threads.join(nvtx_threads, on=["pid", "tid"], how="full", coalesce=True).select(
            "pid", "tid", pl.coalesce("thread_name", "os_name").alias("thread_name")
        )
        processes = self._fetch("PROCESSES", _spec(gpid=("globalPid", _I64), name=("name", _STR)))
        processes = (
            processes.filter(pl.col("gpid").is_not_null())
            .select(_pid("gpid").alias("pid"), pl.col("name").alias("process_name"))
            .unique("pid", keep="first")
        )
        used_pids = (
            pl.concat([events.select("pid"), threads.select("pid")], how="vertical_relaxed")
            .filter(pl.col("pid").is_not_null())
            .unique()
        )
        process_rows = used_pids.join(processes, on="pid", how="left").with_columns(
            pl.lit(None, dtype=_I64).alias("tid")
        )
        threads = threads.join(processes, on="pid", how="left")
        streams = self._fetch(
            "TARGET_INFO_NVTX_CUDA_STREAM",
            _spec(device=("deviceId", _I64), stream=("streamId", _I64), thread_name=("name", _STR)),
        )
        frame = pl.concat([process_rows, threads, streams], how="diagonal_relaxed")
        frame = frame.sort(["pid", "tid", "device", "stream"], nulls_last=False)
        return THREADS.conform(frame)
