"""The Kineto reader's whole-trace steps: flow endpoints bound to their slices, flows paired,
launch links, label ids, threads, the main process, devices and event names.

Each step runs on generated frames (few distinct keys, so many endpoints and slices share
one; nulls in every key column; columns in several chunks; empty inputs) and is compared
with a reference written plainly in Python here, row by row.
"""

from __future__ import annotations

import random
import re
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.parsers import _kineto_flows as kineto_flows
from tracekit.parsers import _kineto_meta as kineto_meta
from tracekit.parsers import _kineto_parts as kineto_parts
from tracekit.parsers import _kineto_threads as kineto_threads
from tracekit.schema import EVENT_KIND, FLOW_KIND, FLOWS, LAUNCH_KINDS, LINKS, THREADS


def _frames(seed: int, n_flows: int, n_slices: int, nulls: bool, chunks: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = random.Random(seed)

    def value(pool: int) -> int | None:
        if nulls and rng.random() < 0.05:
            return None
        return rng.randrange(pool) - pool // 2

    def pieces(frame: pl.DataFrame) -> pl.DataFrame:
        # the same rows in several chunks, as the parts of the parse give them
        if chunks == 1 or frame.height < chunks:
            return frame
        step = frame.height // chunks
        parts = [frame.slice(i * step, step if i < chunks - 1 else frame.height) for i in range(chunks)]
        return pl.concat(parts, rechunk=False)

    flows = pl.DataFrame(
        {
            "pid": [value(3) for _ in range(n_flows)],
            "tid": [value(4) for _ in range(n_flows)],
            "start_ns": [value(40) for _ in range(n_flows)],
        },
        schema={"pid": pl.Int64, "tid": pl.Int64, "start_ns": pl.Int64},
    )
    ids = list(range(n_slices))
    rng.shuffle(ids)
    slices = pl.DataFrame(
        {
            "_track_pid": [value(3) for _ in range(n_slices)],
            "_track_tid": [value(4) for _ in range(n_slices)],
            "start_ns": [value(40) for _ in range(n_slices)],
            "event_id": ids,
        },
        schema={"_track_pid": pl.Int64, "_track_tid": pl.Int64, "start_ns": pl.Int64, "event_id": pl.Int64},
    )
    return pieces(flows), pieces(slices)


def _bound_by_hand(flows: pl.DataFrame, slices: pl.DataFrame) -> list[int | None]:
    """Each endpoint's slice, found row by row: the largest event id among the slices with
    the endpoint's (pid, tid, start), None where there is none or a key is null."""
    largest: dict[tuple[int, int, int], int] = {}
    for pid, tid, start, event in slices.select("_track_pid", "_track_tid", "start_ns", "event_id").iter_rows():
        if pid is not None and tid is not None and start is not None:
            key = (pid, tid, start)
            largest[key] = max(event, largest.get(key, event))
    return [largest.get(key) for key in flows.select("pid", "tid", "start_ns").iter_rows()]


@pytest.mark.parametrize(
    ("seed", "n_flows", "n_slices", "nulls", "chunks"),
    [
        (1, 500, 800, False, 1),
        (2, 500, 800, True, 1),
        (3, 700, 300, True, 4),
        (4, 2000, 3000, False, 7),
        (5, 0, 100, False, 1),
        (6, 100, 0, True, 1),
        (7, 0, 0, False, 1),
    ],
)
def test_binding_matches_a_row_by_row_search(seed: int, n_flows: int, n_slices: int, nulls: bool, chunks: int) -> None:
    flows, slices = _frames(seed, n_flows, n_slices, nulls, chunks)
    got = kineto_flows.bind_endpoints(flows, slices)
    assert got.dtype == pl.Int64
    assert got.name == "event_id"
    assert got.to_list() == _bound_by_hand(flows, slices)
    if n_flows and n_slices:
        # the cases bind some endpoints and leave others unbound
        assert 0 < got.null_count() < n_flows


def test_binding_reads_sliced_columns() -> None:
    # slices of frames: every chunk starts at an offset into its buffers
    flows, slices = _frames(9, 3000, 4000, True, 3)
    flows, slices = flows.slice(17, 2000), slices.slice(5, 3000)
    assert kineto_flows.bind_endpoints(flows, slices).to_list() == _bound_by_hand(flows, slices)


def test_binding_takes_the_largest_event_id_and_never_matches_null() -> None:
    flows = pl.DataFrame(
        {"pid": [1, 1, None, 2], "tid": [5, 5, 5, None], "start_ns": [10, 11, 10, 10]},
        schema={"pid": pl.Int64, "tid": pl.Int64, "start_ns": pl.Int64},
    )
    slices = pl.DataFrame(
        {"_track_pid": [1, 1, 1, None, 2], "_track_tid": [5, 5, 6, 5, None], "start_ns": [10, 10, 10, 10, 10],
         "event_id": [3, 9, 20, 30, 40]},
    )
    assert kineto_flows.bind_endpoints(flows, slices).to_list() == [9, None, None, None]


def test_flows_of_null_ids_come_in_one_order() -> None:
    # a source and a destination without an id pair with nothing: two rows per kind, put
    # after each other by their ends (they came in a grouping's arbitrary order before)
    flow_rows = pl.DataFrame(
        {
            "ph": ["s", "f", "s", "f", "s", "f"],
            "_cat": ["ac2g", "ac2g", "ac2g", "ac2g", "fwdbwd", "fwdbwd"],
            "id": [None, None, 7, 7, None, None],
            "id_label": [None, None, None, None, None, None],
            "pid": [1, 1, 1, 1, 1, 1],
            "tid": [1, 1, 1, 1, 1, 1],
            "start_ns": [10, 20, 30, 40, 50, 60],
        },
        schema={"ph": pl.String, "_cat": pl.String, "id": pl.Int64, "id_label": pl.String,
                "pid": pl.Int64, "tid": pl.Int64, "start_ns": pl.Int64},
    )
    slices = pl.DataFrame(
        {"_track_pid": [1] * 6, "_track_tid": [1] * 6, "start_ns": [10, 20, 30, 40, 50, 60], "event_id": [0, 1, 2, 3, 4, 5]},
    )
    expected = [
        (None, "launch", None, 1), (None, "launch", 0, None), (7, "launch", 2, 3),
        (None, "fwdbwd", None, 5), (None, "fwdbwd", 4, None),
    ]
    for _ in range(5):
        assert kineto_flows.flows_table(flow_rows, slices).rows() == expected


def _events(seed: int, n: int, nulls: bool, chunks: int) -> pl.DataFrame:
    """Events in canonical order (``event_id`` the row number) with every kind and few
    correlation ids, so ids are shared by several launches, by none, or by exactly one."""
    rng = random.Random(seed)
    kinds = EVENT_KIND.categories.to_list()
    frame = pl.DataFrame(
        {
            "event_id": list(range(n)),
            "kind": [rng.choice(kinds) for _ in range(n)],
            "correlation": [None if nulls and rng.random() < 0.1 else rng.randrange(n // 3 + 1) for _ in range(n)],
        },
        schema={"event_id": pl.Int64, "kind": EVENT_KIND, "correlation": pl.Int64},
    )
    if chunks == 1 or n < chunks:
        return frame
    step = n // chunks
    return pl.concat([frame.slice(i * step, step if i < chunks - 1 else n) for i in range(chunks)], rechunk=False)


def _links_by_hand(events: pl.DataFrame) -> list[tuple[int, int, int, str]]:
    """The correlation links row by row: each kernel, copy, memset or sync row whose id is
    carried by exactly one runtime or driver call, in event order."""
    targets = {"kernel", "memcpy", "memset", "sync"}
    launches: dict[int, list[int]] = {}
    rows = events.select("event_id", "kind", "correlation").rows()
    for event, kind, correlation in rows:
        if kind in LAUNCH_KINDS and correlation is not None:
            launches.setdefault(correlation, []).append(event)
    return [
        (launches[correlation][0], event, correlation, "correlation")
        for event, kind, correlation in rows
        if kind in targets and len(launches.get(correlation, ())) == 1
    ]


@pytest.mark.parametrize(
    ("seed", "n", "nulls", "chunks"),
    [(1, 3000, False, 1), (2, 3000, True, 1), (3, 5000, True, 6), (4, 1, False, 1), (5, 0, False, 1)],
)
def test_correlation_links_match_a_row_by_row_count(seed: int, n: int, nulls: bool, chunks: int) -> None:
    events = _events(seed, n, nulls, chunks)
    got = kineto_flows.correlation_links(events)
    assert got.schema == LINKS.polars_schema
    assert got.rows() == _links_by_hand(events)
    if n > 100:
        assert got.height  # the case links some GPU rows (and, by its few ids, leaves others)


def test_correlation_links_trust_only_an_id_of_one_launch() -> None:
    events = pl.DataFrame(
        {
            "kind": ["runtime", "kernel", "runtime", "runtime", "kernel", "driver", "memcpy", "kernel", "kernel"],
            "correlation": [1, 1, 2, 2, 2, None, None, 3, None],
        },
        schema={"kind": EVENT_KIND, "correlation": pl.Int64},
    ).with_row_index("event_id").with_columns(pl.col("event_id").cast(pl.Int64))
    assert kineto_flows.correlation_links(events).rows() == [(0, 1, 1, "correlation")]


#: each flow category's kind (anything else is ``other``)
_FLOW_KIND_OF = {"ac2g": "launch", "async": "launch", "async_gpu": "launch", "async_cpu_to_gpu": "launch", "fwdbwd": "fwdbwd"}


def _flows_by_hand(flow_rows: pl.DataFrame, slices: pl.DataFrame) -> list[tuple[int, str, int | None, int | None]]:
    """The flows row by row: for each (kind, id) with a source or a destination, the slice of
    its first source and of its first destination in file order (bound or not), by kind (in
    the enum's order) and id."""
    bound = _bound_by_hand(flow_rows, slices)
    first: dict[tuple[str, int], dict[str, int | None]] = {}
    for (ph, cat, flow_id), event in zip(flow_rows.select("ph", "_cat", "id").iter_rows(), bound, strict=True):
        if ph not in ("s", "f"):
            continue
        ends = first.setdefault((_FLOW_KIND_OF.get(cat, "other"), flow_id), {})
        ends.setdefault(ph, event)
    order = FLOW_KIND.categories.to_list()
    return [
        (flow_id, kind, ends.get("s"), ends.get("f"))
        for (kind, flow_id), ends in sorted(first.items(), key=lambda item: (order.index(item[0][0]), item[0][1]))
    ]


@pytest.mark.parametrize(
    ("seed", "n_flows", "n_slices", "chunks", "cats"),
    [
        (11, 600, 800, 1, ("ac2g",)),
        (12, 900, 700, 5, ("ac2g", "fwdbwd", "gpu_user_annotation", "")),
        (13, 1, 5, 1, ("fwdbwd",)),
        (14, 50, 50, 1, ("ac2g", "async_cpu_to_gpu")),
    ],
)
def test_pairing_matches_a_row_by_row_pass(
    seed: int, n_flows: int, n_slices: int, chunks: int, cats: tuple[str, ...]
) -> None:
    # few ids, so a flow has several sources and destinations (the first in file order
    # wins, bound or not), steps ("t") that pair with nothing, kinds sharing an id
    rng = random.Random(seed)
    ends, slices = _frames(seed, n_flows, n_slices, True, chunks)
    flow_rows = pl.DataFrame(
        {
            "ph": [rng.choice("sfft") for _ in range(n_flows)],
            "_cat": [rng.choice(cats) for _ in range(n_flows)],
            "id": [rng.randrange(n_flows // 4 + 1) - 3 for _ in range(n_flows)],
            "id_label": pl.Series([None] * n_flows, dtype=pl.String),
        },
        schema={"ph": pl.String, "_cat": pl.String, "id": pl.Int64, "id_label": pl.String},
    ).hstack(ends.rechunk())
    got = kineto_flows.flows_table(flow_rows, slices)
    assert got.schema == FLOWS.polars_schema
    assert got.rows() == _flows_by_hand(flow_rows, slices)
    if n_flows > 100:
        # the cases have flows with both ends, one end, and an unbound end
        assert got["src_event_id"].null_count()
        assert got["dst_event_id"].null_count()
        assert got.drop_nulls().height


@pytest.mark.parametrize(("seed", "n"), [(1, 0), (2, 1), (3, 500), (4, 3000)])
def test_slices_carry_the_event_ids_the_canonical_sort_gives(seed: int, n: int) -> None:
    """The event id of each unsorted row is its position in the canonical order (the
    order's inverse), as the flows are bound before the sort."""
    from tracekit.schema import canonical_order

    rng = random.Random(seed)
    timed = pl.DataFrame(
        {
            "_track_pid": [rng.randrange(3) for _ in range(n)],
            "_track_tid": [rng.randrange(3) for _ in range(n)],
            "start_ns": [rng.randrange(50) for _ in range(n)],
            "dur_ns": [rng.randrange(5) for _ in range(n)],
        },
        schema={"_track_pid": pl.Int64, "_track_tid": pl.Int64, "start_ns": pl.Int64, "dur_ns": pl.Int64},
    )
    order = canonical_order(timed)
    slices = kineto_flows.event_slices(timed, order)
    assert slices.columns == ["_track_pid", "_track_tid", "start_ns", "event_id"]
    event_id = slices["event_id"].to_list()
    assert sorted(event_id) == list(range(n))
    assert all(event_id[row] == position for position, row in enumerate(order.to_list()))


def test_final_ids_on_the_series_match_the_expression() -> None:
    """The end of the parse renumbers label ids on the Series; the expression it replaced
    (a gather at ``base - id`` for the ids handed out, every other id as it is) is the spec."""
    base = kineto_threads.TEMP_LABEL_BASE
    ids = {base - k: -(k + 1) * 7 for k in range(5)}
    values = [base, base - 4, base - 5, base + 1, None, -(2**63), 2**63 - 1, 0, 12, base - 2, None, base - 1]
    column = pl.Series("pid", values * 3, dtype=pl.Int64)
    column = pl.concat([column.slice(0, 10), column.slice(10)], rechunk=False)  # two chunks
    finals = pl.Series([ids[base - k] for k in range(len(ids))], dtype=pl.Int64)
    col = pl.col("pid")
    temporary = (col <= base) & (col > base - len(ids))
    index = pl.when(temporary).then(pl.lit(base, dtype=pl.Int64) - col)
    want = column.to_frame().select(pl.coalesce(pl.lit(finals).gather(index), col)).to_series()
    got = kineto_threads.final_id_series(column, ids)
    assert got.dtype == pl.Int64
    assert got.name == "pid"
    assert got.to_list() == want.to_list()
    assert got.to_list()[:4] == [-7, -35, base - 5, base + 1]
    # a column without temporary ids, and no ids at all, come back as they are
    plain = pl.Series("tid", [1, None, -(2**63)], dtype=pl.Int64)
    assert kineto_threads.final_id_series(plain, ids) is plain
    assert kineto_threads.final_id_series(column, {}) is column
    frame = pl.DataFrame([column, column.alias("tid"), column.alias("other")])
    renumbered = kineto_threads.renumber(frame, ids)
    assert renumbered["tid"].to_list() == want.to_list()
    assert renumbered["other"].to_list() == column.to_list()
    assert frame["pid"].to_list() == column.to_list()  # the input frame is left as it was


def test_flow_kinds_on_the_series() -> None:
    cats = ["ac2g", "fwdbwd", "async", "", None, "async_gpu", "ASYNC", "async_cpu_to_gpu", "gpu_user_annotation"]
    kinds = kineto_flows.flow_kind_series(pl.Series("_cat", cats, dtype=pl.String))
    want = ["launch", "fwdbwd", "launch", "other", "other", "launch", "other", "launch", "other"]
    assert kinds.dtype == FLOWS.polars_schema["flow_kind"]
    assert kinds.to_list() == want


def _metadata_frame(rows: list[tuple[str | None, int | None, int | None, str | None]]) -> pl.DataFrame:
    """``ph: M`` rows as the parse's metadata parts hold them: (name, pid, tid, label)."""
    return pl.DataFrame(
        [
            pl.Series("name", [r[0] for r in rows], dtype=pl.String),
            pl.Series("pid", [r[1] for r in rows], dtype=pl.Int64),
            pl.Series("tid", [r[2] for r in rows], dtype=pl.Int64),
            pl.Series("label", [r[3] for r in rows], dtype=pl.String),
        ]
    )


#: Unicode's White_Space characters: polars' (Rust's) ``\s`` and ``strip_chars``; Python's
#: ``\s`` and ``str.strip()`` also take the four separators U+001C to U+001F
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
#: a stream's thread name: "stream" (any case) and an ASCII digit, after white space
_STREAM_NAME = re.compile(f"[{_WHITE_SPACE}]*stream[{_WHITE_SPACE}]+[0-9]", re.IGNORECASE)


def _stream_number(name: str | None) -> int | None:
    """A thread name's stream number: its first run of ASCII digits, where the name is a
    stream's and the number fits int64 (None otherwise)."""
    if name is None or _STREAM_NAME.match(name) is None:
        return None
    digits = re.search("[0-9]+", name)
    assert digits is not None  # (the name has one after "stream")
    number = int(digits.group())
    return number if number < 2**63 else None


def _threads_by_hand(meta: list[tuple[Any, Any, Any, Any]]) -> pl.DataFrame:
    """The threads table of (name, pid, tid, label) rows in file order, row by row: the last
    label of each process and of each thread, a thread's process name by its pid (a null pid
    matches nothing, as in a join), the processes without a thread; a thread named as a
    stream is a GPU track of the device its pid names (where it fits int32), with neither pid
    nor tid; sorted by every column, nulls last."""
    procs: dict[Any, Any] = {}
    threads: dict[tuple[Any, Any], Any] = {}
    for name, pid, tid, label in meta:
        if name == "process_name":
            procs[pid] = label
        elif name == "thread_name":
            threads[(pid, tid)] = label
    rows: list[tuple[Any, Any, Any, Any, Any, Any]] = []
    for (pid, tid), thread_name in threads.items():
        process_name = procs.get(pid) if pid is not None else None
        stream = _stream_number(thread_name)
        device = pid if stream is not None and pid is not None and -(2**31) <= pid < 2**31 else None
        if device is not None:
            pid = tid = None
        name = None if thread_name is None else thread_name.strip(_WHITE_SPACE)
        rows.append((pid, tid, device, stream, process_name, name))
    with_threads = {pid for pid, _ in threads}
    rows.extend((pid, None, None, None, label, None) for pid, label in procs.items() if pid is None or pid not in with_threads)
    # (texts by code point, which is polars' order of their UTF-8 bytes)
    rows.sort(key=lambda r: tuple((value is None, value) for value in (r[0], r[1], r[2], r[3], r[5], r[4])))
    columns = list(zip(*rows, strict=True)) if rows else [()] * 6
    return pl.DataFrame(
        [pl.Series(column.name, values, dtype=column.dtype) for column, values in zip(THREADS.columns, columns, strict=True)]
    )


def _same_threads_both_ways(rows: list[tuple[Any, Any, Any, Any]]) -> pl.DataFrame:
    """The threads table of ``rows``, checked against the row-by-row reference."""
    got = kineto_threads.threads_table(_metadata_frame(rows))
    want = _threads_by_hand(rows)
    assert got.schema == want.schema
    assert got.to_dicts() == want.to_dicts()
    return got


def test_threads_match_a_row_by_row_grouping() -> None:
    """polars' grouping and joins give the table of the row-by-row reference, with null pids,
    tids and labels, repeated keys, processes without threads and names that are (and are
    not quite) stream names."""
    rows = [
        ("process_name", 1, 0, "python"),
        ("thread_name", 1, 11, " main thread "),
        ("thread_name", 1, 11, "main"),  # the last one wins
        ("process_name", 1, 5, "python3"),  # a process's last name, whatever its tid
        ("process_name", 2, 0, None),
        ("thread_name", 0, 7, "stream 7"),
        ("thread_name", 0, 8, " Stream 12 "),
        ("thread_name", 0, 9, "stream x"),
        ("thread_name", 0, 10, "stream \u0663"),
        ("thread_name", 0, 12, "stream 99999999999999999999"),
        ("thread_name", 3_000_000_000, 1, "stream 3"),  # a pid past int32: no device
        ("process_name", None, 0, "no pid"),
        ("thread_name", None, 4, "stream 4"),
        ("thread_name", 5, None, "no tid"),
        ("thread_name", 6, 1, None),
        ("process_name", 7, 0, "lonely"),
        ("process_name", 0, 0, "GPU 0"),
    ]
    assert _same_threads_both_ways(rows).height == 13
    _same_threads_both_ways([])


#: thread names around the edges of "a stream's name": white space Unicode has and Python's
#: ``\\s`` adds (U+001C), case folding (U+017F folds to "s"), digits that are not ASCII,
#: numbers past int64, leading zeros
_THREAD_NAMES = [
    "stream 7", " Stream 12 ", "STREAM 4", "\u017ftream 3", "stream\u00a05", "\u3000stream\u2003 8 ",
    "\x1cstream 6", "stream\x1c6", "stream 6\x1c", "stream x", "stream \u0663", "stream 0007",
    "stream 9223372036854775807", "stream 9223372036854775808", "sTrEaM 1x2", "streams 1", "main",
    "\u0085 thread \u0085", "", None,
]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["process_name", "thread_name"]),
            st.sampled_from([None, 0, 1, 7, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1]),
            st.sampled_from([None, 0, 3, 11]),
            st.sampled_from(_THREAD_NAMES),
        ),
        max_size=24,
    )
)
def test_threads_match_a_row_by_row_grouping_on_any_rows(rows: list[tuple[str, int | None, int | None, str | None]]) -> None:
    """Any metadata rows: polars' grouping, regular expressions, casts and sort give the
    reference's stream numbers, devices, stripped names and order."""
    _same_threads_both_ways(rows)


@pytest.mark.parametrize(
    "rows",
    [
        [(5, True, 3), (7, True, 3), (5, False, 9), (7, True, 1)],  # most launches
        [(5, False, 2), (7, False, 2), (None, False, 1)],  # no launches: most operators, ties to the lower pid
        [(None, True, 4), (3, True, 4), (3, False, 50)],  # a null pid ties first, as polars' sort has it
        [(9, True, 1), (9, True, 1), (2, True, 1)],  # counts of one pid from several chunks add up
        [],
    ],
)
def test_main_pid_matches_a_row_by_row_count(rows: list[tuple[int | None, bool, int]]) -> None:
    counts = pl.DataFrame(
        [
            pl.Series("pid", [r[0] for r in rows], dtype=pl.Int64),
            pl.Series("launch", [r[1] for r in rows], dtype=pl.Boolean),
            pl.Series("len", [r[2] for r in rows], dtype=pl.UInt32),
        ]
    )
    totals: dict[tuple[int | None, bool], int] = {}
    for pid, launch, n in rows:
        totals[(pid, launch)] = totals.get((pid, launch), 0) + n
    want = None
    for role in (True, False):
        # most events first, then the lower pid; a null pid sorts before every pid
        ranked = [(-n, pid is not None, pid or 0) for (pid, launch), n in totals.items() if launch is role]
        if ranked:
            _, has_pid, pid = min(ranked)
            want = pid if has_pid else None
            break
    assert kineto_threads.find_main_pid(counts) == want


def test_threads_from_the_metadata_parts() -> None:
    """The end of the parse keeps the two names the threads table reads (each key's last
    row) and makes the label ids final before grouping."""
    base = kineto_threads.TEMP_LABEL_BASE
    ids = {base: -2, base - 1: -1}
    rows = [
        ("process_name", 1, 0, "python"),
        ("process_labels", 1, 0, "ignored"),
        ("thread_name", 1, base, "stream 7"),
        ("thread_name", base - 1, 3, "spans"),
        ("process_name", base - 1, 0, "Spans"),
        ("thread_sort_index", 1, 2, "5"),
        ("thread_name", 1, base, " stream 8"),  # the last one wins
        (None, 1, 4, "no name"),
        ("thread_name", None, None, None),
    ]
    parts = [
        pl.DataFrame(
            [
                pl.Series("pid", [r[1] for r in chunk], dtype=pl.Int64),
                pl.Series("tid", [r[2] for r in chunk], dtype=pl.Int64),
                pl.Series("name", [r[0] for r in chunk], dtype=pl.String),
                pl.Series("label", [r[3] for r in chunk], dtype=pl.String),
            ]
        )
        for chunk in (rows[:4], rows[4:])
    ]
    final = [(name, ids.get(pid, pid), ids.get(tid, tid), label) for name, pid, tid, label in rows]
    want = _threads_by_hand(final)
    got = kineto_threads.threads_of_meta(pl.concat(parts), ids)
    assert got.schema == want.schema
    assert got.to_dicts() == want.to_dicts()
    assert got.height == 3


@pytest.mark.parametrize(
    ("devices", "want"), [([None, 1, 1], [0, 1]), ([2, None, 0, 2], [0, 2]), ([None, None], [0]), ([], [0])]
)
def test_devices_the_events_use_are_listed_once(devices: list[int | None], want: list[int]) -> None:
    events = pl.DataFrame([pl.Series("device", devices, dtype=pl.Int32)])
    top = {"deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}
    assert kineto_meta.devices_table(top, events)["device"].to_list() == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.text(alphabet="aAbz_ :é\u00a0\u3000\U0001f600", max_size=6), max_size=12), max_size=5))
def test_names_sorted_match_a_sort_by_code_point(chunks: list[list[str]]) -> None:
    """The chunks' distinct names by polars' unique, sort and search: each name once, in
    code point order (polars' order of their UTF-8 bytes), and each index's rank in it."""
    parts = kineto_parts.Parts()
    parts.names = [pl.Series("name", list(dict.fromkeys(chunk)), dtype=pl.String) for chunk in chunks]
    names, ranks = parts.take_names()
    assert names.dtype == pl.String
    assert ranks.dtype == pl.UInt32
    listed = [name for chunk in chunks for name in dict.fromkeys(chunk)]
    distinct = sorted(set(listed))
    assert names.to_list() == distinct
    assert ranks.to_list() == [distinct.index(name) for name in listed]
