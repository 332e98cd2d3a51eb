"""The Kineto trace cut by destination table as its chunks arrive (:class:`Parts`): each
chunk's categories coded into kinds, its string ids numbered, its rows split into the timed
events, flow endpoints, metadata and memory instants, and its event names coded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from tracekit.schema import EVENT_KIND, GPU_KINDS, LAUNCH_KINDS, EventKind, repeated

from ._kineto_copies import CopyNames
from ._kineto_events import event_columns
from ._kineto_fields import COMMON_CATEGORIES, COMMON_CATEGORY_KINDS, KIND_OF_CATEGORY, any_equal, kind_mask
from ._kineto_threads import TEMP_LABEL_BASE

#: raw columns the events table is built from, besides the order, start, kind and ``_complete``
#: (everything else is dropped early; ``ph`` and ``cat`` have given the kind)
_EVENT_SOURCE_COLUMNS = [
    "dur", "name", "pid", "tid", "tid_label", "device", "stream", "correlation",
    "external_id", "external_id_v1", "bytes", "kind_arg", "grid", "block", "registers", "shared_memory", "occupancy",
    "sync_kind", "wait_on_stream", "wait_corr", "sequence_nr", "python_id", "python_parent_id", "input_dims", "collective",
    "input_types", "concrete_inputs", "pg_name", "pg_ranks", "group_size", "coll_seq", "coll_seq_v2", "msg_elems",
]
#: raw columns of a flow endpoint (``cat`` becomes ``_cat``, lower-cased)
_FLOW_SOURCE_COLUMNS = ["ph", "cat", "id", "id_label", "pid", "tid", "start_ns"]
#: raw columns a timed part is cut with even when null on every row of the chunk
_TIMED_SOURCES = frozenset(("dur", "name", "pid", "tid"))
#: raw columns of a ``[memory]`` instant, besides its start
_MEMORY_SOURCE_COLUMNS = [
    "pid", "tid", "mem_device_type", "mem_device_id", "mem_addr", "mem_bytes", "mem_total_allocated",
    "mem_total_reserved",
]
#: timed-part columns kept even when null on every row of a chunk (the whole-trace steps read them)
_TIMED_KEPT = frozenset(("_order", "kind", "name", "pid", "tid", "start_ns", "dur_ns"))


class Parts:
    """The trace cut by destination table, one chunk at a time.

    Each decoded chunk is split as soon as it arrives into the rows of every output: timed
    events already in their canonical columns, flow endpoints, metadata, memory instants.
    The wide raw frame, whose argument columns are mostly null, therefore never exists for
    the whole trace, and peak memory follows the size of the canonical tables.  What needs
    the whole trace (string-id numbering, the main process, base time, rank) is applied
    once at the end, to one or two columns.
    """

    def __init__(self) -> None:
        self.rows = 0
        self.timed: list[pl.DataFrame] = []
        self.flows: list[pl.DataFrame] = []
        self.meta: list[pl.DataFrame] = []
        self.memory: list[pl.DataFrame] = []
        #: per chunk: events per (pid, launches GPU work) for choosing the main process
        self.launchers: list[pl.DataFrame] = []
        #: per chunk: events per unrecognised category
        self.unknown: list[pl.DataFrame] = []
        #: non-numeric pid/tid label → temporary id
        self.labels: dict[str, int] = {}
        #: per chunk: its distinct event names; a timed part's ``name`` is an index into
        #: their concatenation
        self.names: list[pl.Series] = []
        self.name_count = 0
        #: what each memcpy name of the trace says, worked out once
        self.copy_names = CopyNames()
        #: the timed part's expressions, by the chunk's columns (:func:`event_columns`)
        self.event_exprs: dict[Any, list[pl.Expr | str]] = {}
        #: each output's expression, by what it was built from (:func:`event_exprs`)
        self.built_exprs: dict[Any, pl.Expr] = {}

    def add(self, raw: pl.DataFrame, cat_codes: pl.Series | None = None) -> None:
        """Cut one chunk's raw frame.  ``cat_codes``: its rows' categories coded by the native
        scanner (each one of ``COMMON_CATEGORIES``, by position; null where ``cat`` is), or
        None: then they are coded here."""
        n = raw.height
        start = self.rows
        self.rows += n
        raw = self._number_labels(raw)
        # polars' expression engine costs about 0.1 ms a call plus a few µs a column: the cut
        # below works on Series and takes columns by name, where that gives the same values
        cat = raw.get_column("cat")
        codes, code_kinds, folded, traces = _category_codes(cat, cat_codes)
        # every destination's rows found in one pass over the narrow columns (plain comparisons:
        # ``is_in`` with a short list costs twice as much); each part then takes its few
        # columns before filtering (an eager filter of the wide raw frame would copy every one of
        # its columns first), and a part with no rows in the chunk filters nothing
        ph = raw.get_column("ph")
        # (null counts of every column at once; ``stamped`` None: every row has a ``ts``)
        nulls = raw.null_count().row(0)
        present = {c for c, k in zip(raw.columns, nulls, strict=True) if k < n}
        stamped = raw.get_column("ts").is_not_null() if nulls[raw.get_column_index("ts")] else None
        instant = (ph == "i") | (ph == "I")
        is_memory = raw.get_column("name") == "[memory]"
        is_complete = ph == "X"
        complete = is_complete
        if traces:  # (an event of a trace's own span is not one of its events)
            complete = complete & ~any_equal(cat, traces)
        shown = instant & ~is_memory
        if "pid_label" in present:  # (nor are the instants of a profiler's own tracks)
            shown = shown & ~any_equal(raw.get_column("pid_label"), ["", "Traces", "Spans"])
        # a source column null on every row of the chunk is not cut at all (most argument
        # columns, on most chunks): :func:`event_columns` leaves out what it would give
        # (the types by name: ``DataFrame.schema`` costs three times as much)
        dtypes = dict(zip(raw.columns, raw.dtypes, strict=True))
        timed_rows = complete | shown if stamped is None else stamped & (complete | shown)
        # each row's kind gathered by its category code (a native gather: ``Series.gather`` and
        # a ``with_columns`` are queries of their own); only a complete event has its
        # category's kind, an instant is an instant.  Worked out for every row of the chunk
        # (narrow native work), so that the timed rows are cut with their kind instead of
        # their ``ph`` and ``cat`` texts (two string columns fewer through the filter)
        kinds = code_kinds[codes].zip_with(is_complete, repeated("kind", EventKind.INSTANT.value, EVENT_KIND, n))
        if kinds.null_count():  # (a timed row of a category without a kind: counted, then ``other``)
            unknown = pl.DataFrame([cat, kinds.alias("kind")]).filter(timed_rows & kinds.is_null())
            if unknown.height:
                self.unknown.append(unknown.group_by("cat").len())
            kinds = kinds.fill_null(EventKind.OTHER.value)
        raw = raw.hstack(
            [
                pl.int_range(start, start + n, dtype=pl.Int64, eager=True).alias("_order"),
                raw.get_column("ts").alias("start_ns"),
                kinds.alias("kind"),
                is_complete.alias("_complete"),
            ]
        )
        self.meta.append(_rows(raw, ph == "M", ["pid", "tid", "name", "label"]))
        flow = (ph == "s") | (ph == "f") | (ph == "t")
        self.flows.append(_flow_part(raw, flow if stamped is None else flow & stamped, folded))
        memory = _rows(raw, instant & is_memory, ["start_ns", *_MEMORY_SOURCE_COLUMNS])
        if memory.height or not self.memory:
            self.memory.append(_memory_rows(memory))
        # (``dur_ns`` is worked out in :func:`event_columns`' select, from ``_complete``)
        timed = _rows(
            raw, timed_rows,
            [
                "_order", "start_ns", "kind", "_complete",
                *(c for c in _EVENT_SOURCE_COLUMNS if c in present or c in _TIMED_SOURCES),
            ],
        )
        # (the raw frame and its masks freed before the timed part's columns are built)
        del raw, ph, stamped, instant, is_memory, complete, is_complete, shown, memory, flow, codes, kinds
        del timed_rows
        self._add_timed(timed, dtypes)

    def _add_timed(self, timed: pl.DataFrame, dtypes: dict[str, pl.DataType]) -> None:
        """The chunk's timed rows in the events table's columns, and its launch counts."""
        # the kinds' masks by comparisons of their codes (a third of an enum's comparison to
        # text; an ``is_in`` in the select cost more than all of them together)
        codes = timed.get_column("kind").to_physical()
        timed = timed.hstack(
            [
                kind_mask(codes, GPU_KINDS).alias("_on_gpu"),
                kind_mask(codes, (EventKind.MEMCPY.value,)).alias("_memcpy"),
                kind_mask(codes, (EventKind.SYNC.value,)).alias("_sync"),
            ]
        )
        # events per (pid, launches GPU work) among the launches and CPU operators, counted
        # by pid for each of the two (a Series' value counts cost a fifth of a two-key
        # group_by) and stacked natively (``pl.concat`` costs ten times as much; the chunks'
        # counts are concatenated once more at the end)
        pids = timed.get_column("pid")
        launched = pids.filter(kind_mask(codes, LAUNCH_KINDS)).value_counts(name="len")
        operators = pids.filter(kind_mask(codes, (EventKind.CPU_OP.value,))).value_counts(name="len")
        launch = pl.Series("launch", [True] * launched.height + [False] * operators.height, dtype=pl.Boolean)
        self.launchers.append(launched.vstack(operators).insert_column(1, launch))
        part = event_columns(
            timed, dtypes, self.copy_names, self.event_exprs, self._name_codes(timed), self.built_exprs
        )
        del timed
        # a column null on every row of the chunk is not kept (most argument columns are, on
        # most chunks: a quarter of the part's memory); the concatenation fills it back with
        # nulls where another chunk has values, and the canonical sort writes a column that
        # no chunk has as nulls, as it does for any all-null column
        nulls = part.null_count().row(0)
        empty = [c for c, k in zip(part.columns, nulls, strict=True) if k == part.height and c not in _TIMED_KEPT]
        # (taken by name: a ``drop`` is a query of its own)
        self.timed.append(part[[c for c in part.columns if c not in empty]] if empty else part)

    def _number_labels(self, raw: pl.DataFrame) -> pl.DataFrame:
        """String pids/tids ("Spans", "stream 7") get temporary ids, numbered finally in
        :meth:`final_label_ids`.  A numeric id in the temporary ids' range (at most -2**62:
        only a hostile trace has one) is taken as a label too, by its decimal text, so no
        trace's id is mistaken for a temporary one."""
        # (the least id against the range: a reduction, no mask of every row)
        reserved = [c for c in ("pid", "tid") if _at_most(raw.get_column(c).min(), TEMP_LABEL_BASE)]
        if reserved:
            raw = raw.with_columns(
                e
                for c in reserved
                for e in (
                    pl.when(pl.col(c) <= TEMP_LABEL_BASE)
                    .then(pl.col(c).cast(pl.String))
                    .otherwise(pl.col(c + "_label"))
                    .alias(c + "_label"),
                    pl.when(pl.col(c) > TEMP_LABEL_BASE).then(pl.col(c)).alias(c),
                )
            )
        n = raw.height
        texts = [raw.get_column(c) for c in ("pid_label", "tid_label")]
        texts = [text for text in texts if text.null_count() < n]
        if not texts:
            return raw
        # (each column's distinct labels by a native value count: a concatenation, a
        # ``drop_nulls`` and a ``unique`` were two queries and a copy)
        for text in texts:
            for label in text.value_counts().get_column(text.name).to_list():
                if label is not None and label not in self.labels:
                    self.labels[label] = TEMP_LABEL_BASE - len(self.labels)
        # each label's temporary id by an enum cast of the labels (every label of the chunk is
        # one of ``self.labels`` by now) and a gather, where the row has no numeric id: Series
        # work, no query of its own (a ``replace_strict`` in a ``with_columns`` paged in 1.5 MB
        # of polars' code that nothing else in a parse uses)
        enum = pl.Enum(list(self.labels))
        ids = pl.Series("", list(self.labels.values()), dtype=pl.Int64)
        out = raw.clone()  # (shallow: replacing a column of it leaves ``raw`` as it was)
        for col in ("pid", "tid"):
            text = raw.get_column(col + "_label")
            if text.null_count() == n:
                continue
            numeric = raw.get_column(col)
            labelled = ids[text.cast(enum).to_physical()]
            out.replace_column(out.get_column_index(col), numeric.zip_with(numeric.is_not_null(), labelled).alias(col))
        return out

    def final_label_ids(self) -> dict[int, int]:
        """Temporary id → final id: -1, -2, ... by sorted label."""
        return {self.labels[label]: -(i + 1) for i, label in enumerate(sorted(self.labels))}

    def _name_codes(self, timed: pl.DataFrame) -> pl.Expr:
        """The timed rows' event names as indices into the chunk's distinct names (an
        expression of :func:`event_columns`' select, which has no query of its own).

        A chunk's names are mostly repeats, and a text column holds views into the text
        buffers it was cut from: kept as text, every part (and the sorted events table after
        it) would keep the scanner's whole name buffer of its chunk alive."""
        names = timed.get_column("name")
        name = pl.col("name")
        if names.null_count():  # (an event without a name is named ""; a fill copies the column, so only then)
            names = names.fill_null("")
            name = name.fill_null("")
        # (a native value count: ``unique`` is a query of its own; the order of the distinct
        # names is immaterial, as is unique's)
        distinct = names.value_counts().get_column(names.name)
        first = self.name_count
        self.names.append(distinct)
        self.name_count += distinct.len()
        if not distinct.len():
            return name.cast(pl.UInt32).alias("name")
        # a name's position among the distinct names is its code in an enum of them (the
        # cast costs 40 % less than a hash replacement; the names are never null here)
        codes = name.cast(pl.Enum(distinct)).to_physical().cast(pl.UInt32)
        return (codes + first if first else codes).alias("name")

    def take_names(self) -> tuple[pl.Series, pl.Series]:
        """The trace's distinct event names in sorted order, and for each index a timed
        part's ``name`` holds, the position of its name in them (so sorting the indices
        sorts the names)."""
        every = pl.concat(self.names) if self.names else pl.Series("name", [], dtype=pl.String)
        self.names.clear()
        ordered = every.unique().sort()
        return ordered, ordered.search_sorted(every).cast(pl.UInt32)

    def take_timed(self) -> pl.DataFrame:
        """All timed events (the list is emptied so only the result holds them)."""
        frame = pl.concat(self.timed, how="diagonal_relaxed", rechunk=False)
        self.timed.clear()
        return frame

    def unknown_categories(self) -> str | None:
        """The warning for the timed events of unrecognised categories (kept as kind
        ``other``), with the commonest five, or None where there were none."""
        if not self.unknown:
            return None
        cats = (
            concat_parts(self.unknown).group_by("cat").agg(pl.col("len").sum())
            .sort(["len", "cat"], descending=[True, False], nulls_last=True)
        )
        total = int(cats["len"].sum())
        listing = ", ".join(f"{c}×{n}" for c, n in cats.head(5).iter_rows())
        return f"{total:,} events of unrecognised categories kept as kind 'other' ({listing})"


def _at_most(least: Any, bound: int) -> bool:
    """Whether a column's least value (None when it has none) is at most ``bound``."""
    return least is not None and least <= bound


def _category_codes(cat: pl.Series, scanned: pl.Series | None) -> tuple[pl.Series, pl.Series, bool, list[str]]:
    """Each row's category coded, once: (the codes, the kind of each code, whether every
    category was lower-case already, the categories that name a trace's own span).

    In the usual chunk every category is a common lower-case one, and one enum cast codes
    them (or the scanner already did, ``scanned``: the cast hashes every row's text, a good
    part of this thread's work on a chunk; the codes only index the kinds, so their integer
    type does not matter).  Otherwise the chunk's few distinct categories are lower-cased and
    mapped to kinds, and the rows coded by an enum of them (lower-casing every row's category
    cost more than the rest of the category work together, and ``replace_strict`` costs
    0.3 ms a call even on ten values)."""
    if scanned is not None and scanned.len() == cat.len():
        codes = scanned
    else:
        codes = cat.cast(COMMON_CATEGORIES, strict=False).to_physical()
    if codes.null_count() == cat.null_count():
        return codes, COMMON_CATEGORY_KINDS, True, []
    # (the few distinct categories by a native value count, lower-cased by Python where they
    # are ASCII, which is polars' lower-casing there too: five queries fewer on a chunk the
    # last chunks of a trace usually are)
    cats = [c for c in cat.value_counts().get_column(cat.name).to_list() if c is not None]
    if all(c.isascii() for c in cats):
        lowered = [c.lower() for c in cats]
    else:
        lowered = pl.Series(cats, dtype=pl.String).str.to_lowercase().to_list()
    code_kinds = pl.Series("kind", [KIND_OF_CATEGORY.get(c) for c in lowered], dtype=EVENT_KIND)
    traces = [c for c, low in zip(cats, lowered, strict=True) if low == "trace"]
    return cat.cast(pl.Enum(cats)).to_physical(), code_kinds, lowered == cats, traces


def _flow_part(raw: pl.DataFrame, mask: pl.Series, folded: bool) -> pl.DataFrame:
    """The flow endpoints among the chunk's rows (``mask``), their category lower-cased as
    ``_cat`` (``folded``: every category already is) and never null."""
    flows = _rows(raw, mask, _FLOW_SOURCE_COLUMNS)
    flow_cat = flows.get_column("cat")
    if not folded:
        flow_cat = flow_cat.str.to_lowercase()
    if flow_cat.null_count():  # (a fill copies the column even when there is nothing to fill)
        flow_cat = flow_cat.fill_null("")
    return flows.replace_column(1, flow_cat.alias("_cat"))


def _rows(raw: pl.DataFrame, mask: pl.Series, columns: Sequence[str]) -> pl.DataFrame:
    """The rows of ``raw`` where ``mask`` holds, in ``columns`` only (taken before filtering;
    by name, which costs a tenth of a ``select``).  (Filtered by a frame's ``filter``, a
    query: filtering each column natively costs a quarter to a half less CPU, but the parts
    are then allocated on the caller's thread instead of polars' pool, which raises the
    peak RSS of every parse, of a large one by tens of MB.)"""
    narrow = raw[list(columns)]
    count = mask.sum()
    if count == narrow.height:
        return narrow
    if count == 0:
        return narrow.clear()
    return narrow.filter(mask)


def concat_parts(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The frames one after the other (the list is emptied); their types relaxed to a common
    one only where they differ (a relaxed concatenation is a query of its own, a plain one
    is not)."""
    if len(frames) == 1:
        out = frames[0]
    else:
        schema = frames[0].schema if frames else None
        same = all(f.schema == schema for f in frames[1:])
        out = pl.concat(frames, how="vertical" if same else "vertical_relaxed")
    frames.clear()
    return out


def _memory_rows(mem: pl.DataFrame) -> pl.DataFrame:
    """``[memory]`` instants of one chunk in the memory table's columns (base time added later)."""
    # Device Type: 0 = CPU, 1 = CUDA (c10::DeviceType); host memory gets device -1
    device = pl.when(pl.col("mem_device_type") == 0).then(-1).otherwise(pl.col("mem_device_id"))
    return mem.select(
        pl.col("start_ns"),
        pl.col("pid"),
        pl.col("tid"),
        device.cast(pl.Int32, strict=False).alias("device"),
        pl.col("mem_addr").alias("address"),
        pl.col("mem_bytes").alias("bytes"),
        pl.col("mem_total_allocated").alias("total_allocated_bytes"),
        pl.col("mem_total_reserved").alias("total_reserved_bytes"),
    )
