"""Longest paths of the step graphs: the contraction of thread runs, a topological order that breaks
clock-skew cycles, and every step's path and length (the native kernel where it was built,
networkx otherwise; the same answers)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import networkx as nx
import polars as pl

from ...native import load as load_native
from ..whatif import TAG_CAUSE, TAGS
from .edges import (
    EDGE_PRIORITY,
    EDGE_SCHEMA,
    STEP_KEY,
    STEP_SCHEMA,
    EdgeKind,
    cause_dtype,
    compact_dtypes,
    segment_schema,
)


def step_lengths(weighted: pl.DataFrame, attrs: Sequence[str]) -> list[tuple[int, int, list[int]]]:
    """(rank, step, the longest path's length under each weight in ``attrs``) of every step
    of ``weighted`` (edges sorted by step, then in the order they enter each graph)."""
    sizes = weighted.group_by(STEP_KEY, maintain_order=True).len()
    native = native_dag()
    done: dict[tuple[int, int], list[int]] = {}
    if native is not None and _native_ok(weighted, attrs):
        lengths, _, status, _, _ = native.longest_paths(
            _int64(weighted["src"]), _int64(weighted["dst"]), [_int64(weighted[a]) for a in attrs], _offsets(sizes["len"]), False
        )
        flat, ok = memoryview(lengths).cast("q"), memoryview(status).cast("q")
        k = len(attrs)
        for i, (rank, step) in enumerate(sizes.select(STEP_KEY).iter_rows()):
            if ok[i] == _DAG_OK:
                done[(int(rank), int(step))] = list(flat[i * k : (i + 1) * k])
    rows: list[tuple[int, int, list[int]]] = []
    offset = 0
    for rank, step, n in sizes.iter_rows():
        key = (int(rank), int(step))
        g = weighted.slice(offset, n)
        offset += n
        if key in done:
            rows.append((*key, done[key]))
            continue
        G = nx.DiGraph()
        G.add_edges_from((u, v, dict(zip(attrs, ws, strict=True))) for u, v, *ws in g.select("src", "dst", *attrs).iter_rows())
        topo, _ = acyclic_order(G)
        rows.append((*key, longest_lengths(G, topo, attrs)))
    return rows


#: the native kernel's status of a graph it solved (others: a cycle, an overflow, no memory,
#: which the networkx path handles)
_DAG_OK = 0


def native_dag() -> Any:
    """The native longest-path kernel (tracekit/native/_dag.c), or None where it was not
    built or ``TRACEKIT_PURE_PYTHON`` asks for the pure Python path."""
    return load_native("dag")


def _native_ok(edges: pl.DataFrame, weights: Sequence[str]) -> bool:
    """Whether the kernel gives networkx's answer on ``edges``: no missing ids or weights, and
    one edge per node pair (a networkx graph keeps the first position and the last weights of
    a repeated pair; the kernel would keep both)."""
    cols = ["src", "dst", *weights]
    if any(edges[c].null_count() for c in cols):
        return False
    return bool(edges.select(pl.struct("src", "dst").n_unique()).item() == edges.height)


def _int64(s: pl.Series) -> memoryview:
    """The values of an int64 column without nulls, as a buffer (no copy when it is one chunk)."""
    arr = s.cast(pl.Int64).rechunk().to_arrow()
    if len(arr) == 0:
        return memoryview(b"")
    data = arr.buffers()[1]
    return memoryview(data)[arr.offset * 8 : (arr.offset + len(arr)) * 8]


def _offsets(sizes: pl.Series) -> memoryview:
    """Group offsets (0, then the running total of ``sizes``) as an int64 buffer."""
    return _int64(pl.concat([pl.Series([0], dtype=pl.Int64), sizes.cast(pl.Int64).cum_sum()]))


def longest_lengths(G: nx.DiGraph, topo: Sequence[int], attrs: Sequence[str]) -> list[int]:
    """The longest path's length in ``G`` under each weight in ``attrs``, in one pass over ``topo``.

    The same lengths as ``nx.dag_longest_path`` followed by :func:`path_length` for each weight
    (a path may start at any node, so a node's distance is never below 0), computed for every
    weight at once instead of one traversal per weight.
    """
    k = len(attrs)
    dist: dict[int, list[int]] = {}
    best = [0] * k
    pred = G.pred
    for v in topo:
        d = [0] * k
        for u, data in pred[v].items():
            du = dist[u]
            for i in range(k):
                x = du[i] + data[attrs[i]]
                if x > d[i]:
                    d[i] = x
        dist[v] = d
        for i in range(k):
            if d[i] > best[i]:
                best[i] = d[i]
    return best


def longest_paths(windows: pl.DataFrame, compact: pl.DataFrame, runs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    pairs, stats = step_paths(compact)
    syncs = compact.filter(pl.col("kind") == EdgeKind.SYNC.value).group_by(STEP_KEY).agg(
        pl.len().cast(pl.Int64).alias("sync_edges"), pl.col("inferred").sum().cast(pl.Int64).alias("inferred_sync_edges")
    )
    zero = ["path_ns", "nodes", "edges", "sync_edges", "inferred_sync_edges", "cycles_broken"]
    steps = windows.sort(STEP_KEY).join(stats, on=STEP_KEY, how="left", maintain_order="left").join(
        syncs, on=STEP_KEY, how="left", maintain_order="left"
    ).with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("wall_ns"),
        # a step without edges has no graph: no path, and none of its counts
        *[pl.when(pl.col("edges").is_null()).then(0).otherwise(pl.col(c).fill_null(0)).alias(c) for c in zero],
    ).select(list(STEP_SCHEMA)).cast(STEP_SCHEMA)  # type: ignore[arg-type]
    if pairs.height == 0:
        return pl.DataFrame(schema=segment_schema()), steps
    path_edges = pairs.join(compact.drop(*STEP_KEY), on=["src", "dst"], how="left", maintain_order="left").select("seq", *EDGE_SCHEMA, "run").with_columns(
        pl.col("seq").cast(pl.Int64), *[pl.col(c).cast(pl.String) for c in compact_dtypes()]
    )
    # a contracted run of a thread's stretches stands for its stretches, in time order
    single = path_edges.filter(pl.col("run").is_null()).with_columns(pl.lit(0, dtype=pl.Int64).alias("_sub")).drop("run")
    expanded = path_edges.filter(pl.col("run").is_not_null()).select("seq", "run").join(runs, on="run").with_columns(
        pl.col("start_ns").rank("ordinal").over("seq").cast(pl.Int64).alias("_sub")
    ).drop("run")
    seg = pl.concat([single, expanded.select(single.columns)], how="vertical_relaxed")
    seg = seg.filter(pl.col("w") != 0).sort([*STEP_KEY, "seq", "_sub"]).with_columns(
        pl.int_range(pl.len()).over(STEP_KEY).cast(pl.Int64).alias("seq"),
        pl.col("tag").replace_strict(dict(TAG_CAUSE), return_dtype=cause_dtype()).alias("cause"),
    )
    seg = seg.select(
        "rank", "step", "seq", "start_ns", "end_ns", pl.col("w").alias("dur_ns"),
        pl.coalesce("track", pl.format("cpu {}/{}", "pid", "tid")).alias("track"), "event_id",
        pl.col("kind").alias("edge_kind"), "cause", "inferred",
    )
    return seg.cast(segment_schema()), steps  # type: ignore[arg-type]


def step_paths(compact: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every step's longest path as consecutive node pairs (rank, step, seq, src, dst), and
    its length and size (rank, step, path_ns, nodes, edges, cycles_broken); ``compact`` is
    sorted by step, then in the order the edges enter the step's graph."""
    pair_schema = {"rank": pl.Int32, "step": pl.Int64, "seq": pl.UInt32, "src": pl.Int64, "dst": pl.Int64}
    stat_schema = {"rank": pl.Int32, "step": pl.Int64, "path_ns": pl.Int64, "nodes": pl.Int64, "edges": pl.Int64, "cycles_broken": pl.Int64}
    sizes = compact.group_by(STEP_KEY, maintain_order=True).len().cast({"len": pl.Int64})
    pair_parts: list[pl.DataFrame] = []
    stat_parts: list[pl.DataFrame] = []
    left = sizes
    native = native_dag()
    if native is not None and sizes.height and _native_ok(compact, ["w"]):
        lengths, nodes, status, path, path_off = native.longest_paths(
            _int64(compact["src"]), _int64(compact["dst"]), [_int64(compact["w"])], _offsets(sizes["len"]), True
        )
        counts = pl.Series(list(memoryview(path_off).cast("q")), dtype=pl.Int64).diff().slice(1)
        solved = sizes.with_columns(
            pl.Series("path_ns", list(memoryview(lengths).cast("q")), dtype=pl.Int64),
            pl.Series("nodes", list(memoryview(nodes).cast("q")), dtype=pl.Int64),
            pl.Series("_status", list(memoryview(status).cast("q")), dtype=pl.Int64),
            counts.alias("_n"),
        )
        # the path's nodes, each with its step; a pair is a node and the next one of its step
        ids = pl.Series("src", memoryview(path).cast("q").tolist(), dtype=pl.Int64)
        walk = solved.select(*STEP_KEY, pl.col("_n")).with_columns(pl.int_ranges("_n").alias("seq")).explode("seq").drop_nulls("seq")
        walk = walk.with_columns(ids, pl.col("seq").cast(pl.UInt32)).with_columns(pl.col("src").shift(-1).alias("dst"))
        pair_parts.append(walk.filter(pl.col("seq") < pl.col("_n") - 1).select(list(pair_schema)))
        stat_parts.append(
            solved.filter(pl.col("_status") == _DAG_OK).select(
                *STEP_KEY, "path_ns", "nodes", pl.col("len").alias("edges"), pl.lit(0, dtype=pl.Int64).alias("cycles_broken")
            )
        )
        left = solved.filter(pl.col("_status") != _DAG_OK).select(*STEP_KEY, "len")
    if left.height:
        starts = sizes.with_columns((pl.col("len").cum_sum() - pl.col("len")).alias("_at")).join(left.select(STEP_KEY), on=STEP_KEY, how="semi")
        rows = []
        for rank, step, n, at in starts.iter_rows():
            G = nx.DiGraph()
            G.add_weighted_edges_from(compact.slice(at, n).select("src", "dst", "w").iter_rows(), weight="w")
            topo, broken = acyclic_order(G)
            path = nx.dag_longest_path(G, weight="w", topo_order=topo)
            pair_parts.append(
                pl.DataFrame({"src": path[:-1], "dst": path[1:]}, schema={"src": pl.Int64, "dst": pl.Int64}).with_row_index("seq").select(
                    pl.lit(rank, dtype=pl.Int32).alias("rank"), pl.lit(step, dtype=pl.Int64).alias("step"), "seq", "src", "dst"
                )
            )
            rows.append((rank, step, path_length(G, path, "w"), G.number_of_nodes(), G.number_of_edges(), broken))
        stat_parts.append(pl.DataFrame(rows, schema=stat_schema, orient="row"))
    pairs = pl.concat([p.cast(pair_schema) for p in pair_parts]) if pair_parts else pl.DataFrame(schema=pair_schema)  # type: ignore[arg-type]
    stats = pl.concat([p.cast(stat_schema) for p in stat_parts]) if stat_parts else pl.DataFrame(schema=stat_schema)  # type: ignore[arg-type]
    return pairs, stats


def acyclic_order(G: nx.DiGraph) -> tuple[list[int], int]:
    """A topological order of ``G`` and how many edges had to go to make it acyclic.

    The graph is acyclic by construction (every edge follows the recorded order of events);
    inconsistent clocks could still close a loop, and then the lightest edge of each cycle
    is dropped until none is left.
    """
    broken = 0
    while True:
        try:
            return list(nx.topological_sort(G)), broken
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(G)
            u, v = min(cycle, key=lambda e: G.edges[e[0], e[1]]["w"])[:2]
            G.remove_edge(u, v)
            broken += 1


def contract(edges: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(contracted edges, the thread stretches of every run).

    An instant of a thread that nothing but its own thread touches has one edge in and one
    out; every path through it takes both, so the run of stretches between two instants that
    other edges reference becomes one edge.  Its weight is split by tag (``w_<tag>``) so a
    what-if can still scale each part.
    """
    is_chain = pl.col("kind").is_in([EdgeKind.CPU.value, EdgeKind.DATA_LOADING.value])
    chain = edges.filter(is_chain)
    other = edges.filter(~is_chain)
    junction = pl.concat([other.select(pl.col("src").alias("n")), other.select(pl.col("dst").alias("n"))]).unique()
    keys = ["rank", "step", "pid", "tid"]
    chain = chain.sort([*keys, "start_ns"]).with_columns(pl.col("src").is_in(junction["n"].implode()).alias("_j"))
    starts_run = pl.col("_j") | (pl.col("src") != pl.col("dst").shift(1).over(keys)).fill_null(True)
    chain = chain.with_columns(starts_run.cast(pl.Int64).cum_sum().alias("run"))
    per_tag = [pl.when(pl.col("tag") == t).then(pl.col("w")).otherwise(0).sum().alias(f"w_{t}") for t in TAGS]
    runs = chain.group_by("run", maintain_order=True).agg(
        pl.col("rank").first(), pl.col("step").first(), pl.col("src").first(), pl.col("dst").last(), pl.col("w").sum(),
        pl.when((pl.col("kind") == EdgeKind.DATA_LOADING.value).all()).then(pl.lit(EdgeKind.DATA_LOADING.value))
        .otherwise(pl.lit(EdgeKind.CPU.value)).alias("kind"),
        pl.when(pl.col("tag").n_unique() == 1).then(pl.col("tag").first()).otherwise(pl.lit("cpu")).alias("tag"),
        pl.lit(False).alias("removable"), pl.col("inferred").any(),
        pl.when(pl.len() == 1).then(pl.col("event_id").first()).otherwise(None).alias("event_id"),
        pl.col("track").first(), pl.col("pid").first(), pl.col("tid").first(), pl.col("start_ns").first(), pl.col("end_ns").last(), *per_tag,
    )
    singles = other.with_columns(
        pl.lit(None, dtype=pl.Int64).alias("run"),
        *[pl.when(pl.col("tag") == t).then(pl.col("w")).otherwise(0).alias(f"w_{t}") for t in TAGS],
    )
    cols = [*EDGE_SCHEMA, "run", *[f"w_{t}" for t in TAGS]]
    compact = pl.concat([singles.select(cols), runs.select(cols)], how="vertical_relaxed")
    members = chain.select("run", *EDGE_SCHEMA)

    # the same on a stream: an activity whose end leads only to the next activity on its
    # stream becomes one edge with the gap after it
    only_out = compact.group_by("src").len().filter(pl.col("len") == 1).select(pl.col("src").alias("dst"))
    gpu = compact.filter(pl.col("kind") == EdgeKind.GPU.value).join(only_out, on="dst", how="semi")
    pairs = gpu.join(compact.filter(pl.col("kind") == EdgeKind.STREAM.value), left_on="dst", right_on="src", suffix="_s")
    if pairs.height:
        first = int(compact["run"].max() or 0) + 1  # type: ignore[arg-type]
        pairs = pairs.with_columns((pl.int_range(pl.len()) + first).cast(pl.Int64).alias("run"))
        merged = pairs.select(
            "rank", "step", "src", pl.col("dst_s").alias("dst"), (pl.col("w") + pl.col("w_s")).alias("w"), "kind", "tag",
            "removable", "inferred", "event_id", "track", "pid", "tid", "start_ns", pl.col("end_ns_s").alias("end_ns"), "run",
            *[(pl.col(f"w_{t}") + pl.col(f"w_{t}_s")).alias(f"w_{t}") for t in TAGS],
        )
        fine = pl.concat([
            pairs.select("run", *EDGE_SCHEMA, pl.col("w_" + "kernel").alias("_drop")).drop("_drop"),
            pairs.select("run", *[pl.col(f"{c}_s").alias(c) if f"{c}_s" in pairs.columns else pl.col(c) for c in EDGE_SCHEMA]),
        ])
        gone = pl.concat([pairs.select("src", "dst"), pairs.select(pl.col("dst").alias("src"), pl.col("dst_s").alias("dst"))])
        compact = pl.concat([compact.join(gone, on=["src", "dst"], how="anti"), merged.select(cols)], how="vertical_relaxed")
        members = pl.concat([members, fine.select(members.columns).cast(members.schema)])
    compact = compact.with_columns(pl.col("kind").replace_strict(EDGE_PRIORITY, return_dtype=pl.Int32).alias("_prio")).sort(
        ["rank", "step", "_prio", "dst", "src"]
    ).drop("_prio")
    return compact.cast(compact_dtypes()), members  # type: ignore[arg-type]


def path_length(G: nx.DiGraph, path: Sequence[int], weight: str) -> int:
    return int(sum(G.edges[u, v][weight] for u, v in itertools.pairwise(path)))
