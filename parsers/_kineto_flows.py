"""Flows and launch links of a Kineto trace.

Flow endpoints (``ph`` s/f/t) are bound to the slice they start on and paired by (kind, id)
into arrows.  A launch link joins a runtime or driver call to the GPU activity it launched: by
correlation id where the id names exactly one launch call, else by a launch arrow between the
two.
"""

from __future__ import annotations

import polars as pl

from tracekit.schema import FLOW_KIND, FLOWS, LAUNCH_KINDS, LINK_SOURCE, LINKS, EventKind, FlowKind, repeated

from ._kineto_fields import any_equal

#: a flow's category (lower-cased) → its flow kind; any other category is ``other``
_FLOW_CATEGORY: dict[str, str] = {
    "ac2g": "launch",
    "async": "launch",
    "async_gpu": "launch",
    "async_cpu_to_gpu": "launch",
    "fwdbwd": "fwdbwd",
}
#: the kinds a launch link can point at
_LINK_TARGETS = [k.value for k in (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.SYNC)]


def _track_key(pid: str, tid: str, start: str) -> pl.Expr:
    """One 64-bit hash of (pid, tid, start): single-column joins and sets cost a fraction of
    multi-column ones on millions of rows; matches are checked on the real columns."""
    return pl.struct(pl.col(pid).alias("p"), pl.col(tid).alias("t"), pl.col(start).alias("s")).hash(seed=0)


def event_slices(timed: pl.DataFrame, order: pl.Series) -> pl.DataFrame:
    """Every timed event's track, start and the event id the canonical sort will give it
    (``order`` is :func:`canonical_order` of ``timed``: the event ids are its inverse)."""
    event_id = pl.Series("event_id", [], dtype=pl.Int64).extend_constant(None, order.len())
    if order.len():
        event_id = event_id.scatter(order, pl.int_range(0, order.len(), dtype=pl.Int64, eager=True))
    # from the columns alone: a ``select`` on the frame (many chunks a column) would first
    # copy every column of it into one chunk
    return pl.DataFrame([*(timed.get_column(c) for c in ("_track_pid", "_track_tid", "start_ns")), event_id])


#: every flow kind, at its position in the enum (a code's kind is gathered from it)
_FLOW_KINDS = pl.Series("flow_kind", FLOW_KIND.categories.to_list(), dtype=FLOW_KIND)


def flow_kind_series(cat: pl.Series) -> pl.Series:
    """The flow kind of each lower-cased category: comparisons with the few known categories
    (a fraction of the cost of a hash ``replace`` of every row's text), each kind's code (its
    position in the enum) put where one of its words matches, the rest ``other``; on the
    Series, the enum gathered by code (no query)."""
    rows = cat.len()
    codes = repeated("", _FLOW_CODES[FlowKind.OTHER.value], pl.UInt32(), rows)
    for value in dict.fromkeys(_FLOW_CATEGORY.values()):
        matches = any_equal(cat, [c for c, v in _FLOW_CATEGORY.items() if v == value])
        codes = repeated("", _FLOW_CODES[value], pl.UInt32(), rows).zip_with(matches, codes)
    return _FLOW_KINDS[codes].alias("flow_kind")


#: each flow kind's position in the enum
_FLOW_CODES = {kind: i for i, kind in enumerate(FLOW_KIND.categories.to_list())}


def bind_endpoints(flow_rows: pl.DataFrame, keyed: pl.DataFrame) -> pl.Series:
    """Each flow endpoint's slice: the innermost slice starting at its timestamp on its
    track (shortest; among equal ones the later in canonical order), null where none.

    The canonical order sorts rows of one start time by duration, longest first, so among
    the slices that start together the innermost one is the one with the largest event id.
    The rows are joined on one 64-bit hash of (pid, tid, start) and the matches checked on
    the real columns."""
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


def flows_table(flow_rows: pl.DataFrame, keyed: pl.DataFrame) -> pl.DataFrame:
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
    kind_column = flow_kind_series(flow_rows.get_column("_cat"))
    ends = pl.DataFrame(
        [
            (ph == "s").alias("_src"),
            (ph == "f").alias("_dst"),
            kind_column,
            id_column.alias("flow_id"),
            bind_endpoints(flow_rows, keyed),
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


def links_table(events: pl.DataFrame, flows: pl.DataFrame) -> pl.DataFrame:
    """Launch → GPU activity links: by correlation id where it names exactly one launch
    call, else by a launch flow between a launch call and a GPU activity."""
    by_corr = correlation_links(events)
    kinds = events.get_column("kind")
    # on the Series (a filter, a Series' ``gather`` and ``is_in`` are a query each): the launch
    # flows with both ends bound (an id equals itself unless it is null, and a filter drops a
    # null), then the kinds of both ends gathered by event id (the row number) and compared,
    # then the GPU ends that no correlation link has (flags scattered by event id)
    flow_kind, src, dst = (flows.get_column(c) for c in ("flow_kind", "src_event_id", "dst_event_id"))
    both = (flow_kind == "launch") & (src == src) & (dst == dst)
    src, dst = src.filter(both), dst.filter(both)
    if src.len():
        keep = any_equal(kinds[src], LAUNCH_KINDS) & any_equal(kinds[dst], _LINK_TARGETS)
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


def correlation_links(events: pl.DataFrame) -> pl.DataFrame:
    """The links by correlation id: every GPU activity whose id names exactly one launch
    call, in event order (``event_id`` is the row number: the events are in canonical order)."""
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


def fill_sync_threads(events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
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
