"""Threads, processes and labels of a Kineto trace.

String pids and tids ("Spans", "stream 7") get temporary ids while chunks arrive and final
ids by sorted label at the end; the ``ph: M`` metadata rows name the processes and threads
(a thread named as a stream is a GPU track of its device); the main process is the one that
launched GPU work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import polars as pl

from tracekit.schema import THREADS, repeated

#: temporary ids of non-numeric pid/tid labels while chunks arrive; the final ids are
#: given by sorted label once every label is known (so they do not depend on event order)
TEMP_LABEL_BASE = -(2**62)


def renumber(frame: pl.DataFrame, ids: dict[int, int], columns: Sequence[str] = ("pid", "tid")) -> pl.DataFrame:
    """Apply the final label ids to id columns (no-op when the trace had no string ids).

    Column by column on the Series and put back in place: a ``with_columns`` is a query of
    its own, about 0.25 ms each of the four times the end of the parse renumbers."""
    if not ids:
        return frame
    out = frame.clone()  # (shallow: replacing a column of it leaves ``frame`` as it was)
    for c in columns:
        out.replace_column(out.get_column_index(c), final_id_series(out.get_column(c), ids))
    return out


def final_id_series(column: pl.Series, ids: dict[int, int]) -> pl.Series:
    """``column`` with temporary label ids replaced by their final ids (others unchanged).

    Temporary ids are ``TEMP_LABEL_BASE - k`` for k = 0, 1, ...: the final id is gathered
    at index k.  Only the ids handed out are temporary: a numeric id from the trace further
    down (a hostile pid of -2**63) stays what it is instead of indexing past the finals.  On
    the Series alone (comparisons, a gather and two ``zip_with``: no query), and the column
    itself where it holds no temporary id."""
    if not ids or column.len() == 0:
        return column
    temporary = (column <= TEMP_LABEL_BASE) & (column > TEMP_LABEL_BASE - len(ids))  # (null where the id is)
    if not temporary.any():
        return column
    finals = pl.Series([ids.get(TEMP_LABEL_BASE - k) for k in range(len(ids))], dtype=pl.Int64)
    # every other row (and a null one: ``zip_with`` takes a null mask as false) reads index 0,
    # so the subtraction below stays in range for any id the trace has
    base = repeated("", TEMP_LABEL_BASE, pl.Int64(), column.len())
    index = (TEMP_LABEL_BASE - column.zip_with(temporary, base)).cast(pl.get_index_type())
    gathered: pl.Series = finals[index].alias(column.name)
    final: pl.Series = gathered.zip_with(temporary, column)
    return final


#: :func:`threads_table` groups up to this many metadata rows in Python (a real trace has a few
#: dozen once each name's last is kept); more go through polars' grouping and joins
THREADS_IN_PYTHON_MAX_ROWS = 4096


def threads_table(meta: pl.DataFrame) -> pl.DataFrame:
    """Process and thread names from the ``ph: M`` rows (in file order: the last one wins)."""
    if meta.height > THREADS_IN_PYTHON_MAX_ROWS:
        return threads_grouped(meta)
    return threads_of_rows(zip(*(meta.get_column(c).to_list() for c in ("name", "pid", "tid", "label")), strict=True))


def meta_rows(parts: list[pl.DataFrame], ids: dict[int, int]) -> Iterator[tuple[Any, Any, Any, Any]]:
    """The metadata parts' (name, pid, tid, label) rows in file order, the label ids final
    (a temporary id is a key of ``ids``, and every key is one: :func:`final_id_series`)."""
    for part in parts:
        columns = [part.get_column(c).to_list() for c in ("name", "pid", "tid", "label")]
        for name, pid, tid, label in zip(*columns, strict=True):
            if name == "process_name" or name == "thread_name":
                yield name, ids.get(pid, pid), ids.get(tid, tid), label


def threads_of_rows(meta: Iterable[tuple[Any, Any, Any, Any]]) -> pl.DataFrame:
    """:func:`threads_table` of (name, pid, tid, label) rows in file order, grouped in Python (the
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
    # each row's columns as :func:`threads_grouped` works them out, in Python (a few rows:
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


def threads_grouped(meta: pl.DataFrame) -> pl.DataFrame:
    """:func:`threads_table` by polars' grouping and joins (for many metadata rows)."""
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


#: :func:`find_main_pid` sums up to this many per-chunk counts in Python (a chunk has a row per
#: process and role, so a real trace has tens); more go through polars' grouping and sort
MAIN_PID_IN_PYTHON_MAX_ROWS = 4096


def find_main_pid(counts: pl.DataFrame) -> int | None:
    """The process that launched GPU work (owner of GPU rows in the canonical tables):
    most runtime/driver calls, else most CPU operators; ties go to the lower pid."""
    if counts.height > MAIN_PID_IN_PYTHON_MAX_ROWS:
        return main_pid_grouped(counts)
    # the few rows summed in Python (a grouping, two filters and a sort were four queries)
    totals: dict[tuple[Any, Any], int] = {}
    for pid, launch, n in zip(*(counts.get_column(c).to_list() for c in ("pid", "launch", "len")), strict=True):
        totals[(pid, launch)] = totals.get((pid, launch), 0) + n
    for role in (True, False):
        # most events first, then the lower pid; a null pid sorts before every pid, as in
        # :func:`main_pid_grouped`'s sort (nulls first)
        ranked = [(-n, pid is not None, pid if pid is not None else 0) for (pid, launch), n in totals.items() if launch is role]
        if ranked:
            _, has_pid, pid = min(ranked)
            return int(pid) if has_pid else None
    return None


def main_pid_grouped(counts: pl.DataFrame) -> int | None:
    """:func:`find_main_pid` by polars' grouping and sort (for many rows)."""
    totals = counts.group_by("pid", "launch").agg(pl.col("len").sum())
    launchers = totals.filter(pl.col("launch"))
    if launchers.height == 0:
        launchers = totals.filter(~pl.col("launch"))
    if launchers.height == 0:
        return None
    value = launchers.sort(["len", "pid"], descending=[True, False])["pid"][0]
    return int(value) if value is not None else None
