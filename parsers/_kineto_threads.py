"""Threads, processes and labels of a Kineto trace.

String pids and tids ("Spans", "stream 7") get temporary ids while chunks arrive and final
ids by sorted label at the end; the ``ph: M`` metadata rows name the processes and threads
(a thread named as a stream is a GPU track of its device); the main process is the one that
launched GPU work.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def threads_of_meta(meta: pl.DataFrame, ids: dict[int, int]) -> pl.DataFrame:
    """The threads table of the metadata rows (``ph: M``, in file order), label ids made final.

    Only the rows :func:`threads_table` reads are renumbered and grouped, and of those only
    each (name, pid, tid)'s last: traces repeat their metadata, up to hundreds of thousands
    of rows of which a few are distinct."""
    name = pl.col("name")
    meta = meta.filter((name == "process_name") | (name == "thread_name"))
    meta = meta.filter(pl.struct(name == "thread_name", "pid", "tid").is_last_distinct())
    return threads_table(renumber(meta, ids))


def threads_table(meta: pl.DataFrame) -> pl.DataFrame:
    """Process and thread names from the ``ph: M`` rows (in file order: the last one wins): the
    last label of each process and of each thread, a thread's process name by its pid, the
    processes without a thread.  A thread named as a stream is a GPU track of the device its
    pid names, and has neither pid nor tid."""
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


def find_main_pid(counts: pl.DataFrame) -> int | None:
    """The process that launched GPU work (owner of GPU rows in the canonical tables):
    most runtime/driver calls, else most CPU operators; ties go to the lower pid.  ``counts``:
    events per (pid, launch) from each chunk, where ``launch`` tells launches from operators."""
    totals = counts.group_by("pid", "launch").agg(pl.col("len").sum())
    launchers = totals.filter(pl.col("launch"))
    if launchers.height == 0:
        launchers = totals.filter(~pl.col("launch"))
    if launchers.height == 0:
        return None
    value = launchers.sort(["len", "pid"], descending=[True, False])["pid"][0]
    return int(value) if value is not None else None
