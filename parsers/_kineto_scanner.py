"""The native scanner's glue: a chunk's columns from ``_kineto_scan``, as the msgspec path
would give them.

The scanner writes typed columns straight from the JSON bytes and hands them over through
the Arrow PyCapsule interface (no copy).  What it leaves to Python is fixed here in one
select: numeric strings in integer and id columns, times of a chunk with a float in it,
rank lists written as strings; events it does not model exactly are decoded by msgspec
alone and merged back in their place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import polars as pl

from tracekit.native import load
from tracekit.schema import repeated

from ._kineto_decode import float_time_series, raw_frame, us_to_ns
from ._kineto_fields import EVENTS_DECODER, RAW_COLUMNS, Event


def native_scanner() -> Any:
    """The native chunk scanner, or None when it was not built or ``TRACEKIT_PURE_PYTHON=1``."""
    return load("kineto_scan")


# column kinds of the native scanner (the K_* enum of _kineto_scan.c); _K_TIME_NS: a time
# column of integers the scanner already multiplied into nanoseconds (no fix here)
_K_STR, _K_INT, _K_TIME, _K_FLOAT, _K_DIM, _K_RAW, _K_RANKS, _K_TIME_NS = range(8)
_BASE_ID = ("pid", "tid", "id")
# the type of a scanned column by kind, for the columns the scanner leaves out when a chunk has
# no value for them (text as strings; times, as integers, are floats only once a float came)
_SCAN_NULL_TYPE: dict[int, pl.DataType] = {
    _K_STR: pl.String(), _K_INT: pl.Int64(), _K_TIME: pl.Int64(), _K_FLOAT: pl.Float64(),
    _K_DIM: pl.Int64(), _K_RAW: pl.String(), _K_RANKS: pl.String(), _K_TIME_NS: pl.Int64(),
}


def scan_columns(native: Any, chunk: bytes | memoryview) -> pl.DataFrame | None:
    """One chunk through the native scanner, as the frame :func:`raw_frame` would give;
    None when the scanner left the chunk to the msgspec path.  Raises ValueError when the
    chunk is certainly not JSON (what the msgspec path and Python's json would both say)."""
    scanned = scan(native, chunk)
    return None if scanned is None else scanned_frame(scanned, chunk)


def scan(native: Any, chunk: bytes | memoryview, pool: Any = None, categories: tuple[str, ...] | None = None) -> Any:
    """The native scanner's columns of one chunk (rows, columns, fallback events); None when
    it left the chunk to the msgspec path; ValueError when the chunk is certainly not JSON.
    ``pool``: the parse's ``Pool`` of freed column memory, or None.  ``categories``: then
    the result has a fourth item, each row's category coded by its position among them (a
    column, which :meth:`Parts.add` takes), or None where some row's is none of them."""
    scanned = native.scan(chunk, pool, categories)
    if scanned is False:
        raise ValueError("not valid JSON")
    return scanned


def scanned_frame(scanned: Any, chunk: bytes | memoryview | None) -> pl.DataFrame | None:
    """The frame of :func:`scan`'s columns (``chunk``, the scanned bytes, is read only for
    the fallback events, and may be None when there are none); None when the chunk must
    take the msgspec path after all.  A column may already be a Series."""
    rows, columns, fallback = scanned
    extra: pl.DataFrame | None = None
    float_times: set[str] = set()
    if fallback:  # events the scanner did not decode exactly: msgspec decodes just those
        native_floats = {name for name, kind, nfloat, *_ in columns if kind == _K_TIME and nfloat}
        assert chunk is not None
        extra, float_times = _fallback_events(chunk, fallback, native_floats)
        if extra is None:
            return None
    series: dict[str, pl.Series] = {}  # by name: the frame is built in RAW_COLUMNS' order
    temporary: list[pl.Series] = []  # label texts of argument ids, dropped after the fixes
    #: the fixed columns' expressions, by name (every other column is taken as it is)
    fixes: dict[str, pl.Expr] = {}
    nulls: dict[pl.DataType, pl.Series] = {}

    def all_null(dtype: pl.DataType) -> pl.Series:  # one all-null series per type, shared
        if dtype not in nulls:
            # (one null repeated by a native call: ``pl.repeat`` is a query of its own, which
            # costs tens of times as much, and a chunk has about twenty such columns)
            nulls[dtype] = repeated("", None, dtype, rows)
        return nulls[dtype]

    for name, kind, nfloat, nlabels, values, labels in columns:
        if values is None:  # no value in this chunk
            series[name] = all_null(_SCAN_NULL_TYPE[kind]).alias(name)
        else:  # the scanner's buffers, through the Arrow PyCapsule interface (no copy), or a
            # column the prefetch thread already wrapped
            series[name] = (values if isinstance(values, pl.Series) else pl.Series(values)).alias(name)
        if labels is not None:
            label_text = pl.Series(labels).alias(name + "_label")
            if name in _BASE_ID:
                series[label_text.name] = label_text
            else:
                temporary.append(label_text)
        elif name in _BASE_ID:
            series[name + "_label"] = all_null(pl.String()).alias(name + "_label")
        if not (nlabels or (values is not None and kind in (_K_RANKS, _K_TIME))):
            continue  # (no fix: most columns; an expression costs µs to build)
        col = pl.col(name)
        # (a column the scanner left out, all null, stays all null: no fix; the fallback
        # events' own values come through the msgspec path)
        if kind == _K_RANKS and values is not None:  # _rank_list_text: compact list text, else null
            compact = col.str.replace_all(" ", "", literal=True)
            fixes[name] = pl.when(compact.str.starts_with("[") & compact.str.ends_with("]")).then(compact)
        elif kind == _K_TIME and values is not None:
            # time_series: one float in the chunk sends every value through float64 (the
            # scanner gave float64 then; a float among the fallback events needs a cast).
            # (Integers alone came as _K_TIME_NS, already in nanoseconds, unless the chunk
            # has fallback events: then they are microseconds here.)
            fixes[name] = us_to_ns(col.cast(pl.Float64)) if nfloat or name in float_times else col * 1000
        elif kind == _K_INT and nlabels:
            text = pl.col(name + "_label")
            if name in _BASE_ID:  # _id_series: numeric strings are ids, other strings labels
                ints = col.fill_null(text.str.strip_chars().cast(pl.Int64, strict=False))
                fixes[name] = ints
                fixes[name + "_label"] = pl.when(ints.is_null()).then(text)
            else:  # _int_series: numeric strings (and integral floats in them) → ints
                stripped = text.str.strip_chars()
                as_float = stripped.cast(pl.Float64, strict=False)
                from_float = pl.when(as_float.is_finite() & (as_float.abs() < 2.0**63)).then(as_float).cast(pl.Int64)
                fixes[name] = col.fill_null(stripped.cast(pl.Int64, strict=False)).fill_null(from_float)
    frame = pl.DataFrame([series[name] for name in RAW_COLUMNS] + temporary)
    del series, temporary, columns
    if fixes or len(frame.columns) > len(RAW_COLUMNS):
        # the fixes and the column order (the argument ids' label texts left out) in one select
        frame = frame.select(fixes[c].alias(c) if c in fixes else pl.col(c) for c in RAW_COLUMNS)
    if extra is not None:
        return _merge_fallback(frame, extra, rows, fallback)
    return frame


def _fallback_events(
    chunk: bytes | memoryview, fallback: Sequence[tuple[int, int, int]], native_floats: set[str]
) -> tuple[pl.DataFrame | None, set[str]]:
    """The raw frame of the events the scanner left out, decoded by msgspec, and the time
    columns that hold a float there.  (None, ...) when the whole chunk must take the msgspec
    path: when msgspec refuses these events, the old path decodes the whole chunk with its
    tolerant decoder, and only the whole chunk gives the same result then."""
    view = memoryview(chunk)
    payload = b"[" + b",".join(bytes(view[start:end]) for start, end, _ in fallback) + b"]"
    try:
        events: list[Event] = EVENTS_DECODER.decode(payload)
    except (msgspec.DecodeError, RecursionError):  # (msgspec's own depth limit: nesting past it)
        return None, set()
    float_times = {f for f in ("ts", "dur") if any(not isinstance(getattr(e, f), (int, type(None))) for e in events)}
    dropped = [0]
    frame = raw_frame(events, dropped)
    if dropped[0]:
        return None, set()
    # a float among the native rows sends these events' times through float64 too
    redo = native_floats - float_times
    if redo:
        frame = frame.with_columns(float_time_series(f, [getattr(e, f) for e in events]) for f in sorted(redo))
    return frame, float_times


def _merge_fallback(
    native: pl.DataFrame, extra: pl.DataFrame, rows: int, fallback: Sequence[tuple[int, int, int]]
) -> pl.DataFrame:
    """Native rows and fallback rows back in the chunk's event order."""
    index = pl.Series("_i", [i for _, _, i in fallback], dtype=pl.Int64)
    native_index = pl.int_range(rows + len(fallback), dtype=pl.Int64, eager=True).alias("_i")
    native_index = native_index.filter(~native_index.is_in(index.implode()))
    merged = pl.concat(
        [native.with_columns(native_index), extra.with_columns(index)], how="vertical_relaxed"
    ).sort("_i")
    return merged.drop("_i")
