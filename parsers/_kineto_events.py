"""One chunk's timed events in the canonical events table's columns, and the columns that
need the whole trace (the main process on GPU rows, final ids, the rank, the base time).

A chunk's outputs are built from the source columns it has (most chunks lack most argument
columns), by expressions built once per parse for each set of columns and run in one select.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import polars as pl

from tracekit.schema import GPU_KINDS, MEMCPY_KIND, MEMORY_KIND, SYNC_KIND, EventKind, repeated

from ._kineto_copies import DIRECTIONS, CopyNames
from ._kineto_fields import any_equal
from ._kineto_threads import final_id_series

#: a sync row's ``cuda_sync_kind`` argument or name (lower-cased) → its sync kind
_SYNC_NAMES = {
    "stream sync": "stream_sync",
    "context sync": "context_sync",
    "event sync": "event_sync",
    "stream wait event": "stream_wait_event",
}


def event_columns(
    timed: pl.DataFrame,
    dtypes: Mapping[str, pl.DataType] | None = None,
    copy_names: CopyNames | None = None,
    memo: dict[Any, list[pl.Expr | str]] | None = None,
    name: pl.Expr | None = None,
    built: dict[Any, pl.Expr] | None = None,
) -> pl.DataFrame:
    """One chunk's timed events in canonical columns; ``pid``/``tid`` are still the track's
    (GPU rows get the main process in :func:`final_event_columns`).  ``timed`` has the
    rows' ``kind``, ``_complete`` (whether the row is a complete event) and the masks
    ``_on_gpu``, ``_memcpy`` and ``_sync`` besides its source columns.  ``name``: the
    ``name`` column's expression (:meth:`Parts._name_codes`; default: the text).

    A source column ``timed`` lacks (``dtypes``: the types it had in the chunk) was null on
    every row: a column made from such columns alone would be null on every row too, which
    :meth:`Parts.add` drops, so it is left out here (most chunks have a third of the columns).
    ``memo`` keeps the expressions built for each set of columns (building them costs
    0.3 ms of Python a chunk, and most chunks of a trace have the same columns), ``built``
    each output's expression (:func:`event_exprs`)."""
    have = frozenset(timed.columns)
    # the text work on event names (copy direction and memory kinds, sync kinds) is done on
    # the few memcpy and sync rows alone, then put back at their rows
    text = _text_columns(timed, timed.get_column("_memcpy"), timed.get_column("_sync"), copy_names)
    key = (have, frozenset((dtypes or {}).items()))
    exprs = memo.get(key) if memo is not None else None
    if exprs is None:
        # (a chunk with other columns than the chunks before: most of its expressions were
        # built for them already)
        exprs = event_exprs(have, dtypes or {}, built)
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


def event_exprs(
    have: frozenset[str], dtypes: Mapping[str, pl.DataType], built: dict[Any, pl.Expr] | None = None
) -> list[pl.Expr | str]:
    """:func:`event_columns`' outputs for a chunk with the source columns ``have``: an
    expression, or the name of a text column :func:`_text_columns` gives.  Only the outputs
    the chunk has a source for are built (most chunks lack most argument columns, and
    building an expression costs several µs a call); ``built``: the expressions built
    before, by output and what it was built from (kept and reused)."""
    exprs: list[pl.Expr | str] = []
    for at, (sources, made) in enumerate(_outputs(have, dtypes)):
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


#: an output of :func:`event_columns`: the source columns it is made from (None: always made)
#: and a builder of its expression, or the name of a text column :func:`_text_columns` gives
_Output = tuple[tuple[str, ...] | None, Callable[[], pl.Expr] | str]


def _outputs(have: frozenset[str], dtypes: Mapping[str, pl.DataType]) -> list[_Output]:
    """Every output column of the events table, in order, for a chunk with the source
    columns ``have`` (of types ``dtypes``); the builders are called only for what is made."""
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

    return [
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


def _text_columns(
    timed: pl.DataFrame, memcpy: pl.Series, sync: pl.Series, copy_names: CopyNames | None = None
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
        index, said = (copy_names or CopyNames()).lookup(names.filter(memcpy))
        code = index.to_physical()
        # (native gathers by the codes: a select of gathers costs several times as much)
        values = pl.DataFrame([said.get_column(c)[code] for c in ("memcpy_kind", "src_memory", "dst_memory")])
        if "kind_arg" in timed.columns:  # the ``kind`` argument when it is a direction and all of it
            kind_arg = pl.lit(timed.get_column("kind_arg").filter(memcpy))
            memcpy_kind = pl.select(
                pl.coalesce(pl.lit(said.get_column("direction")[code]), pl.when(kind_arg.is_in(DIRECTIONS)).then(kind_arg))
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


def _scattered(values: pl.DataFrame, flag: pl.Series) -> dict[str, pl.Series]:
    """The columns of ``values`` (a row for each row where ``flag`` holds, in order) at those
    rows and null elsewhere, by name."""
    rows = pl.int_range(0, flag.len(), dtype=pl.UInt32, eager=True).filter(flag)
    return {
        column.name: repeated(column.name, None, column.dtype, flag.len()).scatter(rows, column)
        for column in values.get_columns()
    }


def final_event_columns(
    timed: pl.DataFrame, ids: dict[int, int], main_pid: int | None, rank: int | None, base_ns: int,
    name_ranks: pl.Series,
) -> pl.DataFrame:
    """What needs the whole trace: final string ids, the main process on GPU rows (the
    track's ids are kept for flow binding), the rank, the base time, and each event's name
    as its position among the trace's sorted distinct names (:meth:`Parts.take_names`)."""
    # on the Series, each column put back in place (two ``with_columns`` cost more than all
    # of it: a query each); columns kept in the order those gave: the helpers and the rank last
    kind = timed.get_column("kind")
    on_gpu = any_equal(kind, GPU_KINDS)
    no_tid = any_equal(kind, (*GPU_KINDS, EventKind.SYNC.value))
    rows = timed.height
    track_pid = final_id_series(timed.get_column("pid"), ids).alias("_track_pid")
    track_tid = final_id_series(timed.get_column("tid"), ids).alias("_track_tid")
    if main_pid is not None and track_pid.null_count() == 0 and track_pid.min() == main_pid == track_pid.max():
        pid = track_pid.alias("pid")  # every row is the main process already (a trace of one process)
    else:
        main = repeated("pid", main_pid, pl.Int64(), rows)
        pid = main.zip_with(on_gpu, track_pid).alias("pid")
    tid = repeated("tid", None, track_tid.dtype, rows).zip_with(no_tid, track_tid)
    out = timed.clone()
    for column in (pid, tid.cast(pl.Int64), name_ranks[timed.get_column("name")].alias("name")):
        out.replace_column(out.get_column_index(column.name), column)
    out = plus_base(out, base_ns)
    rank_column = repeated("rank", rank if rank is not None else 0, pl.Int32(), rows)
    return out.hstack([track_pid, track_tid, rank_column])


def plus_base(frame: pl.DataFrame, base_ns: int, column: str = "start_ns") -> pl.DataFrame:
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
