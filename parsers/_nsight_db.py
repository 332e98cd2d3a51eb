"""Reading an Nsight Systems SQLite export: which tables and columns it has, and bulk reads.

Every table and column is looked up by name, and anything absent reads as null (the schema
drifts with every nsys release, and ``--lazy`` exports create only non-empty tables).  With
the optional ``adbc-driver-sqlite`` (``pip install tracekit-gpu[nsight]``) a query's result
arrives as Arrow columns, and large exports are read in background threads; a query the
Arrow driver cannot answer exactly (damaged text, a type it rejects) and every query without
the package go through :mod:`sqlite3`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import polars as pl

#: set to "0" to read every table through Python's sqlite3 (the fallback path)
ARROW_ENV = "TRACEKIT_NSIGHT_ARROW"


#: rows fetched per ``fetchmany`` (bounds the Python objects alive at once)
_CHUNK_ROWS = 100_000
#: background threads reading tables through Arrow (each with its own connection)
_PREFETCH_THREADS = 2


#: a table with at least this many rowids is read in one rowid range per thread
_SPLIT_ROWS = 200_000
#: rows per Arrow batch asked of the ADBC SQLite driver (its default is 1024)
_ARROW_BATCH_ROWS = 1 << 20


def open_arrow(uri: str) -> Any:
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


def close_quietly(con: Any) -> None:
    # closing a read-only connection has nothing to lose
    with contextlib.suppress(Exception):
        con.close()


@dataclass
class Db:
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
        # tables only: nsys writes no views, and a view is code of the file's author (one of
        # endless rows, a recursive CTE, would fill memory); one named like a table is absent
        rows = self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        self.tables = frozenset(str(r[0]) for r in rows)

    def close(self) -> None:
        """Stop the background reads (waiting for running ones) and close every connection."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._pending.clear()
        for con in self._worker_cons:
            close_quietly(con)
        self._worker_cons.clear()
        if self.arrow is not None:
            close_quietly(self.arrow)
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
            name = quote(table)
            row = self.con.execute(f"SELECT (SELECT MIN(rowid) FROM {name}), (SELECT MAX(rowid) FROM {name})").fetchone()
        except sqlite3.Error:
            return None
        if row is None or not isinstance(row[0], int) or not isinstance(row[1], int):
            return None
        return int(row[0]), int(row[1])

    def _background_query(self, sql: str, chosen: list[tuple[str, str, pl.DataType]]) -> pl.DataFrame | None:
        con = getattr(self._local, "con", None)
        if con is None:
            con = open_arrow(self.uri) if self.uri is not None else None
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
            rows = self.con.execute(f"PRAGMA table_info({quote(table)})").fetchall()
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
            (n,) = self.con.execute(f"SELECT COUNT(*) FROM {quote(table)}").fetchone()
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
        sql = f"SELECT {', '.join(quote(src) for _, src, _ in chosen)} FROM {quote(table)}"
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
        rows = self.con.execute(f"SELECT name, value FROM {quote(table)}").fetchall()
        return {str(k): str(v) for k, v in rows if k is not None and v is not None}

    def enum(self, table: str) -> dict[int, str]:
        """An ENUM_* table (id, name, label) as id → name; empty when absent."""
        if not self.has(table) or not {"id", "name"} <= set(self.columns(table)):
            return {}
        rows = self.con.execute(f"SELECT id, name FROM {quote(table)}").fetchall()
        return {int(i): str(n) for i, n in rows if isinstance(i, int) and n is not None}

    def scalar(self, table: str, column: str) -> object:
        if not self.has(table) or column not in self.columns(table):
            return None
        row = self.con.execute(f"SELECT {quote(column)} FROM {quote(table)} LIMIT 1").fetchone()
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


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
