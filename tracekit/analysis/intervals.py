"""Vectorised interval algebra on polars frames (no per-interval Python loops).

All functions take and return frames with integer ``start_ns``/``end_ns`` columns and a
list of grouping columns ``by`` (e.g. ``["rank", "device"]`` for a GPU, ``["pid", "tid"]``
for a host thread).  The workhorse is :func:`coverage_at`: for a union of disjoint
intervals, the covered time before an instant is a cumulative sum found with one as-of
join, so the covered time inside any window is ``coverage_at(end) - coverage_at(start)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

START = "start_ns"
END = "end_ns"


def union(frame: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Merge overlapping or touching intervals within each group.

    Returns ``by + [start_ns, end_ns]``, disjoint and sorted within each group; empty and
    negative-length intervals are dropped.
    """
    by = list(by)
    f = frame.select(*by, START, END).filter(pl.col(END) > pl.col(START))
    if f.height == 0:
        return f
    f = f.sort([*by, START])
    # the rows of a group are consecutive: a group starts where any key differs from the row
    # before (nulls equal), and is numbered by a running count (one integer key, not ``by``)
    prev_end = pl.col(END).cum_max().shift(1)
    if by:
        first = pl.any_horizontal([pl.col(c).ne_missing(pl.col(c).shift(1)) for c in by]).fill_null(True)
        f = f.with_columns(first.cast(pl.UInt32).cum_sum().alias("_group"))
        prev_end = prev_end.over("_group")
    # a run starts a group or begins after everything before it in the group ended; runs are
    # consecutive rows in (by, start) order, so numbering them across groups is enough and the
    # merged intervals come out in that order
    new_run = (prev_end.is_null() | (pl.col(START) > prev_end)).cast(pl.UInt32)
    f = f.with_columns(new_run.cum_sum().alias("_run"))
    return f.group_by("_run", maintain_order=True).agg(
        *[pl.col(c).first() for c in by], pl.col(START).first(), pl.col(END).max()
    ).drop("_run")


def _with_cumulative(u: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Add ``_before``: total covered time of earlier intervals in the group."""
    length = pl.col(END) - pl.col(START)
    before = length.cum_sum() - length
    if by:
        before = before.over(list(by))
    return u.with_columns(before.alias("_before"))


def coverage_at(points: pl.DataFrame, u: pl.DataFrame, by: Sequence[str], at: str) -> pl.Series:
    """Covered time of union ``u`` strictly before each instant ``points[at]`` (same group).

    ``u`` must come from :func:`union` (disjoint within groups).  Returns one value per
    row of ``points``, in order.
    """
    by = list(by)
    if u.height == 0 or points.height == 0:
        return pl.Series("covered", [0] * points.height, dtype=pl.Int64)
    cum = _with_cumulative(u, by).select(*by, pl.col(START).alias("_s"), pl.col(END).alias("_e"), "_before")
    cum = cum.sort("_s")
    keyed = points.select(*by, pl.col(at).alias("_t")).with_row_index("_row").sort("_t")
    joined = keyed.join_asof(cum, left_on="_t", right_on="_s", by=by or None, strategy="backward", check_sortedness=False)
    covered = pl.when(pl.col("_s").is_null()).then(0).otherwise(
        pl.col("_before") + (pl.min_horizontal(pl.col("_t"), pl.col("_e")) - pl.col("_s")).clip(lower_bound=0)
    )
    result: pl.Series = joined.with_columns(covered.alias("covered")).sort("_row")["covered"].cast(pl.Int64)
    return result


def covered_in(windows: pl.DataFrame, u: pl.DataFrame, by: Sequence[str], start: str = START, end: str = END) -> pl.Series:
    """Time of each window ``[start, end)`` covered by union ``u`` (same group)."""
    a = coverage_at(windows, u, by, start)
    b = coverage_at(windows, u, by, end)
    result: pl.Series = (b - a).clip(lower_bound=0).alias("covered_ns")
    return result


def clip_to_windows(u: pl.DataFrame, windows: pl.DataFrame, by: Sequence[str], window_by: Sequence[str]) -> pl.DataFrame:
    """Cut intervals at window boundaries: one row per (interval ∩ window) with the window's keys.

    ``windows`` has ``window_by`` (a superset of ``by``) plus ``start_ns``/``end_ns``.  The
    overlap test is an inequality join run per group (groups are few: ranks × devices or
    threads), so it stays vectorised however many intervals there are.
    """
    by, window_by = list(by), list(window_by)
    extra = [c for c in window_by if c not in by]
    schema = {**{c: windows.schema[c] for c in window_by}, START: pl.Int64(), END: pl.Int64()}
    if u.height == 0 or windows.height == 0:
        return pl.DataFrame(schema=schema)
    pieces = []
    win_groups = windows.partition_by(by, as_dict=True, maintain_order=True) if by else {(): windows}
    u_groups = u.partition_by(by, as_dict=True) if by else {(): u}
    for key, win in win_groups.items():
        iv = u_groups.get(key)
        if iv is None or iv.height == 0:
            continue
        w = win.select(*extra, pl.col(START).alias("_ws"), pl.col(END).alias("_we"))
        j = iv.select(pl.col(START).alias("_s"), pl.col(END).alias("_e")).join_where(
            w, pl.col("_s") < pl.col("_we"), pl.col("_e") > pl.col("_ws")
        )
        if j.height == 0:
            continue
        j = j.with_columns(pl.max_horizontal("_s", "_ws").alias(START), pl.min_horizontal("_e", "_we").alias(END))
        values = key if isinstance(key, tuple) else (key,)
        j = j.with_columns([pl.lit(v, dtype=windows.schema[c]).alias(c) for c, v in zip(by, values, strict=True)])
        pieces.append(j.select(*window_by, START, END))
    if not pieces:
        return pl.DataFrame(schema=schema)
    return pl.concat(pieces).sort([*window_by, START])


def complement(u: pl.DataFrame, windows: pl.DataFrame, by: Sequence[str], window_by: Sequence[str]) -> pl.DataFrame:
    """The parts of each window not covered by union ``u``: the gaps.

    Returns ``window_by + [start_ns, end_ns]`` for every uncovered stretch of every window
    (a window with nothing in it is one whole gap).
    """
    window_by = list(window_by)
    clipped = clip_to_windows(u, windows, by, window_by)
    w = windows.select(*window_by, pl.col(START).alias("_ws"), pl.col(END).alias("_we"))
    c = clipped.join(w, on=window_by, how="inner").sort([*window_by, START])
    before = c.select(
        *window_by,
        pl.coalesce(pl.col(END).shift(1).over(window_by), pl.col("_ws")).alias(START),
        pl.col(START).alias(END),
    )
    after = c.group_by(window_by).agg(pl.col(END).max().alias(START), pl.col("_we").first().alias(END))
    empty = w.join(c.select(window_by).unique(), on=window_by, how="anti").select(
        *window_by, pl.col("_ws").alias(START), pl.col("_we").alias(END)
    )
    out = pl.concat([before, after.select(before.columns), empty.select(before.columns)], how="vertical_relaxed")
    return out.filter(pl.col(END) > pl.col(START)).sort([*window_by, START])


def enclosing(
    points: pl.DataFrame, spans: pl.DataFrame, alias: str, *, outermost: bool, take: str = "event_id", all_matches: bool = False
) -> pl.DataFrame:
    """For each point (a row with pid, tid, start_ns, dur_ns), the span on the same thread
    that contains it: the outermost or the innermost one (or every one with ``all_matches``).

    Returns ``_p`` (the point's row index, added if missing) and ``alias`` (the span's
    ``take`` column).  Spans with identical extent are ordered public-name first (``aten::to``
    before ``aten::_to_copy``), then by event id.  One inequality join per thread keeps it
    vectorised in the number of events.
    """
    if "_p" not in points.columns:
        points = points.with_row_index("_p")
    out = []
    spans = spans.filter(pl.col("tid").is_not_null())
    span_groups = spans.partition_by(["pid", "tid"], as_dict=True)
    for key, pts in points.partition_by(["pid", "tid"], as_dict=True).items():
        sp = span_groups.get(key)
        if sp is None or sp.height == 0:
            continue
        j = pts.select("_p", pl.col("start_ns").alias("_a"), (pl.col("start_ns") + pl.col("dur_ns")).alias("_b")).join_where(
            sp.select(
                pl.col(take).alias("_take"),
                pl.col("name").str.starts_with("aten::_").alias("_private"),
                pl.col("start_ns").alias("_ss"),
                pl.col("end_ns").alias("_se"),
                pl.col("event_id").alias("_sid"),
            ),
            pl.col("_ss") <= pl.col("_a"),
            pl.col("_se") >= pl.col("_b"),
        )
        if j.height == 0:
            continue
        if all_matches:
            out.append(j.select("_p", pl.col("_take").alias(alias)))
            continue
        j = j.sort(["_p", "_ss", "_se", "_private", "_sid"], descending=[False, not outermost, outermost, not outermost, not outermost])
        out.append(j.unique("_p", keep="first").select("_p", pl.col("_take").alias(alias)))
    if not out:
        dtype = spans.schema[take] if take in spans.columns else pl.Int64
        return pl.DataFrame(schema={"_p": pl.UInt32, alias: dtype})
    return pl.concat(out)
