"""The host side of a step graph: host events with their nesting, the thread that drives the steps,
the threads that matter, and every thread's timeline cut at event boundaries and tagged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from ...schema import LAUNCH_KINDS, EventKind
from .. import causes, patterns
from ..classify import is_blocking_call, is_host_wait_row
from ..intervals import union
from .edges import CHAIN_KEY, HELPER_IDLE_NS, HOST_KINDS, THREAD_KEY


def host_events(events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """Host-thread events with nesting depth and parent (per thread, on their full extent)."""
    keep = ["rank", "pid", "tid", "event_id", "kind", "name", "start_ns", "end_ns", "correlation"]
    host = events.filter(
        pl.col("kind").is_in(HOST_KINDS) & pl.col("pid").is_not_null() & pl.col("tid").is_not_null() & (pl.col("dur_ns") > 0)
    ).select(keep)
    # explicit sync rows without a recorded API call stand for the call on their thread
    rows = events.filter(
        is_host_wait_row() & pl.col("tid").is_not_null()
        & pl.col("pid").is_not_null() & (pl.col("dur_ns") > 0)
    )
    rows = rows.join(links.select(pl.col("gpu_event_id").alias("event_id")), on="event_id", how="anti").select(keep)
    host = pl.concat([host, rows]).with_columns(pl.col("kind").cast(pl.String))
    host = host.sort([*THREAD_KEY, "start_ns", "end_ns", "event_id"], descending=[False, False, False, True, False])
    order = pl.int_range(pl.len()).over(THREAD_KEY)
    ended = pl.col("end_ns").sort().search_sorted(pl.col("start_ns"), side="right").over(THREAD_KEY)
    host = host.with_columns(order.alias("_ord"), ended.alias("_ended"))
    host = host.with_columns((pl.col("_ord") - pl.col("_ended")).clip(lower_bound=0).alias("depth")).drop("_ended")
    # each row's parent comes back to the row by its position (an as-of join keeps its left
    # side's order): a sort of the row numbers instead of a hash join on event_id
    left = host.select(*THREAD_KEY, "_ord", (pl.col("depth") - 1).alias("_pd")).with_row_index("_row")
    right = host.select(*THREAD_KEY, pl.col("_ord").alias("_pord"), pl.col("depth").alias("_pd"), pl.col("event_id").alias("parent"))
    parents = left.sort("_ord").join_asof(
        right.sort("_pord"), left_on="_ord", right_on="_pord", by=[*THREAD_KEY, "_pd"], strategy="backward",
        allow_exact_matches=False, check_sortedness=False,
    ).select("_row", "parent").sort("_row")
    return host.drop("_ord").with_columns(parents["parent"])


def main_threads(host: pl.DataFrame, events: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """rank → the thread that drives the steps.

    The thread holding the ranges steps are found from (ProfilerStep, user steps, optimizer
    steps, DataLoader fetches) runs the training loop; the autograd engine's thread often
    issues more launches, so launches only decide when no such range exists.
    """
    name = pl.col("name")
    launchers = links.select(pl.col("launch_event_id").alias("event_id")).unique()
    launch_ids = host.join(launchers, on="event_id", how="semi").select("event_id").with_columns(pl.lit(1).alias("_l"))
    markers = (
        name.str.contains(patterns.PROFILER_STEP) | name.str.contains(patterns.USER_STEP)
        | name.str.contains(patterns.OPTIMIZER_STEP) | name.str.contains(r"(?i)enumerate\(DataLoader\)|DataLoaderIter\.__next__")
    )
    score = host.join(launch_ids, on="event_id", how="left").group_by("rank", *THREAD_KEY).agg(
        markers.sum().alias("_steps"), pl.col("_l").sum().alias("_launches"), pl.len().alias("_n"),
    )
    return score.sort(["rank", "_steps", "_launches", "_n", "pid", "tid"], descending=[False, True, True, True, False, False]).unique(
        "rank", keep="first"
    ).select("rank", *THREAD_KEY)


def relevant_threads(host: pl.DataFrame, main: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """The driving thread and every thread that launches GPU work or waits for it.

    Another thread's timeline has no edge to the GPU or to the driving thread, so it can
    never lengthen a path; leaving it out keeps traces with many helper threads cheap.
    """
    launches = host.join(links.select(pl.col("launch_event_id").alias("event_id")).unique(), on="event_id", how="semi")
    waits = host.filter(
        (pl.col("kind") == EventKind.SYNC.value)
        | is_blocking_call()
    )
    return pl.concat([main, launches.select("rank", *THREAD_KEY), waits.select("rank", *THREAD_KEY)]).unique()


def assign_to_windows(rows: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """One row per (row, window it overlaps), with step, w0, w1 and the clipped extent cs/ce."""
    w = win.select("rank", "wi", "w0").sort("w0")
    a = rows.sort("start_ns").join_asof(
        w.rename({"wi": "_wa", "w0": "_w0a"}), left_on="start_ns", right_on="_w0a", by="rank", strategy="backward", check_sortedness=False
    )
    a = a.with_columns((pl.col("end_ns") - 1).alias("_last_ns")).sort("_last_ns").join_asof(
        w.rename({"wi": "_wb", "w0": "_w0b"}), left_on="_last_ns", right_on="_w0b", by="rank", strategy="backward", check_sortedness=False
    )
    a = a.filter(pl.col("_wb").is_not_null()).with_columns(pl.col("_wa").fill_null(0))
    a = a.with_columns(pl.int_ranges("_wa", pl.col("_wb") + 1).alias("wi")).explode("wi").drop("_wa", "_wb", "_w0a", "_w0b", "_last_ns")
    a = a.with_columns(pl.col("wi").cast(pl.Int64)).join(win.with_columns(pl.col("wi").cast(pl.Int64)), on=["rank", "wi"])
    a = a.filter((pl.col("start_ns") < pl.col("w1")) & (pl.col("end_ns") > pl.col("w0")))
    return a.with_columns(
        pl.max_horizontal("start_ns", "w0").alias("cs"), pl.min_horizontal("end_ns", "w1").alias("ce")
    ).filter(pl.col("ce") > pl.col("cs"))


def thread_chains(
    host_w: pl.DataFrame, win: pl.DataFrame, main: pl.DataFrame, cats: Mapping[str, pl.DataFrame], dispatchers: pl.DataFrame
) -> pl.DataFrame:
    """Every host thread's timeline in every window, cut at every event boundary.

    One row per instant ``t`` of a thread (rank, step, pid, tid), sorted by those and ``t``
    (every join below is a left join that keeps that order and adds no row), with the next instant
    ``t_next`` (null for the last), the innermost event open in between (``owner``) and the
    tag of that stretch.
    """
    g = [*CHAIN_KEY, "t"]
    # who owns the stretch after t: the deepest event starting at t, else the parent of the
    # outermost event ending at t (if it is still open).  One sort puts that candidate first
    # among the boundaries at t: starts by depth (deepest first), then ends by depth.
    starts = host_w.select(*CHAIN_KEY, pl.col("cs").alias("t"), pl.col("event_id").alias("_cand"), (-pl.col("depth")).alias("_prio"))
    ends = host_w.select(*CHAIN_KEY, pl.col("ce").alias("t"), pl.col("parent").alias("_cand"), (pl.col("depth") + 1_000_000).alias("_prio"))
    anchors = win.join(main, on="rank").select("rank", "step", "pid", "tid", "w0", "main_end")
    anchors = pl.concat([anchors.select(*CHAIN_KEY, pl.col("w0").alias("t")), anchors.select(*CHAIN_KEY, pl.col("main_end").alias("t"))])
    anchors = anchors.with_columns(pl.lit(None, dtype=pl.Int64).alias("_cand"), pl.lit(2_000_000, dtype=pl.Int64).alias("_prio"))
    bounds = pl.concat([starts, ends, anchors.select(starts.columns)], how="vertical_relaxed")
    chain = bounds.sort([*g, "_prio", "_cand"])
    # the first row of every instant (sorted: an instant's rows are adjacent; no key is null)
    chain = chain.filter(pl.any_horizontal([(pl.col(c) != pl.col(c).shift(1)).fill_null(True) for c in g]))
    # the candidate's extent, and what the owner is (an owner is always its instant's
    # candidate, an event of the same thread and window: one join serves both)
    extents = host_w.select(
        *CHAIN_KEY, pl.col("event_id").alias("_cand"), pl.col("cs").alias("_pcs"), pl.col("ce").alias("_pce"),
        pl.col("kind").alias("_ckind"), pl.col("name").alias("_cname"),
    )
    chain = chain.join(extents, on=[*CHAIN_KEY, "_cand"], how="left", maintain_order="left")
    is_start = pl.col("_prio") <= 0
    still_open = (pl.col("_pcs") <= pl.col("t")) & (pl.col("t") < pl.col("_pce"))
    owned = is_start | still_open
    chain = chain.select(
        *g, pl.when(owned).then(pl.col("_cand")).otherwise(None).alias("owner"),
        pl.when(owned).then(pl.col("_ckind")).otherwise(None).alias("_okind"), pl.when(owned).then(pl.col("_cname")).otherwise(None).alias("_oname"),
        pl.when(owned).then(pl.col("_pce")).otherwise(None).alias("_owner_end"),
    ).with_columns(pl.col("t").shift(-1).over(CHAIN_KEY).alias("t_next"))
    chain = chain.join(main.with_columns(pl.lit(True).alias("main")), on=["rank", *THREAD_KEY], how="left", maintain_order="left").with_columns(
        pl.col("main").fill_null(False)
    )

    # what each stretch is: the host tag of the first cause whose intervals cover it (the
    # timeline's precedence), then the owner event itself
    order = [(c, f"_in_{c.name}") for c in causes.detected() if c.host_tag and c.name in cats]
    chain = chain.with_columns(_covered(chain, {flag: cats[c.name] for c, flag in order}))
    for c, flag in order:
        if c.keeps_own is not None:
            # an innermost event that keeps its own meaning inside the cause's intervals
            keeps = c.keeps_own(pl.col("_okind"), pl.col("_oname")).fill_null(False)
            chain = chain.with_columns((pl.col(flag) & ~keeps).alias(flag))
    cat_tag: Any = pl.lit(None, dtype=pl.String)
    for c, flag in reversed(order):
        cat_tag = pl.when(pl.col(flag)).then(pl.lit(c.host_tag)).otherwise(cat_tag)
    chain = chain.with_columns(cat_tag.alias("_cat")).drop([flag for _c, flag in order])
    # operators that dispatch a launch (the direct parent of a launch call)
    chain = chain.join(dispatchers.with_columns(pl.lit(True).alias("_dispatch")), on="owner", how="left", maintain_order="left")
    own_tag = (
        pl.when(pl.col("_okind").is_in(LAUNCH_KINDS)).then(pl.lit("launch"))
        .when(pl.col("_okind") == EventKind.SYNC.value).then(pl.lit("sync"))
        .when(pl.col("_dispatch").fill_null(False) & (pl.col("_okind") == EventKind.CPU_OP.value)).then(pl.lit("launch"))
        # untraced time: work on the driving thread and in a helper's short gaps, a wait otherwise
        .when(pl.col("owner").is_not_null() | pl.col("main") | ((pl.col("t_next") - pl.col("t")) < HELPER_IDLE_NS)).then(pl.lit("cpu"))
        .otherwise(pl.lit("wait"))
    )
    chain = chain.with_columns(pl.coalesce("_cat", own_tag).alias("tag")).drop("_cat")
    # a helper thread resumes after a wait (or at its first instant), and goes idle before one
    prev_tag = pl.col("tag").shift(1).over(CHAIN_KEY)
    chain = chain.with_columns(
        ((prev_tag.is_null() | (prev_tag == "wait")) & pl.col("t_next").is_not_null()).alias("resumes"),
        ((pl.col("tag") == "wait") | pl.col("t_next").is_null()).alias("idles"),
    )
    return chain.drop("_oname", "_dispatch")


def thread_cover(spans: pl.DataFrame) -> pl.DataFrame:
    """``spans`` merged per thread (pid, tid) as ``_us``/``_ue``, sorted by ``_us`` (what :func:`_covered` looks up)."""
    merged = union(spans.filter(pl.col("tid").is_not_null()), THREAD_KEY)
    return merged.rename({"start_ns": "_us", "end_ns": "_ue"}).sort("_us")


def _covered(points: pl.DataFrame, covers: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """For each name → merged spans (:func:`thread_cover`), whether each point's instant
    ``t`` lies inside one of its thread's spans: one boolean column per name, in the
    points' order (the points are sorted by time once for all of them)."""
    if points.height == 0:
        return pl.DataFrame({name: pl.Series([], dtype=pl.Boolean) for name in covers})
    keyed = points.select(*THREAD_KEY, "t").with_row_index("_row").sort("t")
    flags: list[pl.Expr] = []
    for i, (name, u) in enumerate(covers.items()):
        if u.height == 0:
            flags.append(pl.col("_row").is_null().alias(name))  # no span: False for every point
            continue
        us, ue = f"_us{i}", f"_ue{i}"
        keyed = keyed.join_asof(
            u.rename({"_us": us, "_ue": ue}), left_on="t", right_on=us, by=THREAD_KEY, strategy="backward", check_sortedness=False
        )
        flags.append((pl.col(ue).is_not_null() & (pl.col("t") < pl.col(ue))).alias(name))
    return keyed.sort("_row").select(flags)
