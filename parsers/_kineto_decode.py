"""The msgspec path: chunks of Kineto events decoded into the reader's raw columns.

Every chunk the native scanner leaves (or every chunk, without it) is decoded by msgspec into
the structs of :mod:`._kineto_fields`, which keep only the fields tracekit reads, and turned
into the raw columns once.  A chunk msgspec refuses (NaN literals, a wrongly typed field)
goes through a tolerant slow path that keeps every event it can.  The value converters here
(integers, ids with string labels, microsecond times) are also the reference for the fixes
the scanner's columns get.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import msgspec
import polars as pl

from ._kineto_fields import (
    ARG_DTYPES,
    ARG_GROUPS,
    BASE_FIELDS,
    CATEGORY_GROUP,
    EVENTS_DECODER,
    INT_ARGS,
    STR_ARGS,
    Event,
)


def decode_chunk(chunk: bytes | memoryview, dropped: list[int]) -> list[Event]:
    """Decode one ``[ev,...]`` chunk; raise ValueError if it is not valid JSON at all."""
    try:
        events: list[Event] = EVENTS_DECODER.decode(chunk)
    # DecodeError includes ValidationError (a wrongly typed field); RecursionError is a value
    # nested deeper than msgspec goes, which the tolerant path refuses as well (the salvage
    # search then keeps the events around it)
    except (msgspec.DecodeError, RecursionError):
        events = _tolerant_decode(bytes(chunk), dropped)
    return events


def _tolerant_decode(chunk: bytes, dropped: list[int]) -> list[Event]:
    """Slow path: Python's json (accepts NaN/Infinity), then event-by-event conversion."""
    try:
        items = json.loads(chunk)
    except (ValueError, RecursionError) as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(items, list):
        raise ValueError("not an array")
    out: list[Event] = []
    for item in items:
        if not isinstance(item, dict):
            dropped[0] += 1
            continue
        args = item.pop("args", None)
        fields = {k: v for k, v in item.items() if k in BASE_FIELDS}
        fields = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in fields.items()}
        try:
            ev = msgspec.convert(fields, Event, strict=False)
        except (msgspec.ValidationError, TypeError, ValueError, RecursionError):
            dropped[0] += 1
            continue
        if isinstance(args, dict):
            try:
                ev.args = msgspec.Raw(json.dumps(args, allow_nan=False, default=str).encode())
            except (ValueError, RecursionError):
                clean = {k: v for k, v in args.items() if not (isinstance(v, float) and not math.isfinite(v))}
                try:
                    ev.args = msgspec.Raw(json.dumps(clean, default=str).encode())
                except (ValueError, RecursionError):
                    ev.args = msgspec.Raw(b"{}")
        out.append(ev)
    return out


def _decode_args(decoder: msgspec.json.Decoder[Any], raws: list[msgspec.Raw], dropped: list[int]) -> list[Any]:
    """Decode a group's args objects in one call; fall back object by object if one is bad."""
    payload = b"[" + b",".join(raws) + b"]"
    try:
        return list(decoder.decode(payload))
    except msgspec.DecodeError:
        pass
    out = []
    empty = decoder.decode(b"[{}]")[0]
    for raw in raws:
        try:
            out.append(decoder.decode(b"[" + bytes(raw) + b"]")[0])
        except msgspec.DecodeError:
            try:
                value = json.loads(bytes(raw))
                clean = {k: v for k, v in value.items() if not (isinstance(v, float) and not math.isfinite(v))} if isinstance(value, dict) else {}
                out.append(decoder.decode(b"[" + json.dumps(clean, default=str).encode() + b"]")[0])
            except (ValueError, RecursionError, msgspec.DecodeError):
                dropped[0] += 1
                out.append(empty)
    return out


#: a JSON escape of a UTF-16 surrogate (``\ud800`` to ``\udfff``): Python's json turns a lone
#: one into a str that cannot be encoded as UTF-8 (polars refuses it)
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def loads_text(raw: bytes) -> Any:
    """``json.loads`` of trace bytes, every lone surrogate in a string or key (an escape such
    as ``"\\udfff"`` that pairs with nothing) replaced by U+FFFD, as a UTF-8 decoder does with
    bytes it cannot read.  Raises what ``json.loads`` raises."""
    value = json.loads(raw)
    return without_lone_surrogates(value) if _SURROGATE_ESCAPE.search(raw) else value


def _fixed(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def without_lone_surrogates(value: Any) -> Any:
    """``value`` (decoded JSON) with every lone surrogate of its strings and keys replaced by
    U+FFFD; containers are fixed in place, without recursion (any depth json decodes)."""
    if isinstance(value, str):
        return _fixed(value)
    stack = [value] if isinstance(value, (dict, list)) else []
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            for i, v in enumerate(item):
                if isinstance(v, str):
                    item[i] = _fixed(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        else:
            for k in list(item):
                v = item[k]
                if isinstance(v, str):
                    item[k] = _fixed(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
                fixed = _fixed(k) if isinstance(k, str) else k
                if fixed != k:
                    item[fixed] = item.pop(k)
    return value


def counter_events(chunk: bytes) -> list[dict[str, Any]]:
    try:
        items = loads_text(chunk)
    except (ValueError, RecursionError):
        return []
    rows = []
    for item in items:
        if not isinstance(item, dict) or item.get("ph") != "C" or not isinstance(item.get("args"), dict):
            continue
        for series, value in item["args"].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows.append(
                    {
                        "name": str(item.get("name")),
                        "series": str(series),
                        "pid": item.get("pid"),
                        "ts": item.get("ts"),
                        "value": float(value),
                    }
                )
    return rows


def raw_frame(events: Sequence[Event], dropped: list[int] | None = None) -> pl.DataFrame:
    """Turn decoded structs into raw columns.

    Base fields take one pass each over all events; args are decoded per group (GPU
    activity, launches, operators, Python frames, memory instants, metadata), so each
    arg column is built only from the events that can carry it.
    """
    dropped = dropped if dropped is not None else [0]
    data: dict[str, pl.Series] = {}
    for f in BASE_FIELDS:
        values = list(map(attrgetter(f), events))
        if f in ("ts", "dur"):
            data[f] = time_series(f, values)
        elif f in ("pid", "tid", "id"):
            data[f], data[f + "_label"] = _id_series(f, values)
        else:
            data[f] = _str_series(f, values)
    base = pl.DataFrame(data)
    if not events:
        return base.with_columns([pl.lit(None, dtype=dt).alias(n) for n, dt in ARG_DTYPES.items()])
    cats = base["cat"].str.to_lowercase()
    group = cats.replace_strict(CATEGORY_GROUP, default=None, return_dtype=pl.String)
    ph = base["ph"]
    group = (
        pl.select(
            pl.when(ph == "M").then(pl.lit("meta"))
            .when(ph.is_in(["i", "I"]) & (base["name"] == "[memory]")).then(pl.lit("mem"))
            .when(ph == "X").then(group)
            .otherwise(None)
        )
        .to_series()
    )
    indices = (
        group.to_frame("g").with_row_index("i").drop_nulls("g").group_by("g", maintain_order=True).agg(pl.col("i"))
    )
    raw_args = list(map(attrgetter("args"), events))
    parts = []
    for gname, idx in indices.iter_rows():
        decoder, fields = ARG_GROUPS[gname]
        decoded = _decode_args(decoder, [raw_args[i] for i in idx], dropped)
        cols: dict[str, pl.Series] = {"_i": pl.Series("_i", idx, dtype=pl.UInt32)}
        for f in fields:
            values = list(map(attrgetter(f), decoded))
            cols[f] = _arg_series(f, values)
        parts.append(pl.DataFrame(cols))
    schema = {"_i": pl.UInt32(), **ARG_DTYPES}
    args = pl.concat([pl.DataFrame(schema=schema), *parts], how="diagonal_relaxed") if parts else pl.DataFrame(schema=schema)
    return base.with_row_index("_i").join(args, on="_i", how="left", maintain_order="left").drop("_i")


def _arg_series(f: str, values: list[Any]) -> pl.Series:
    if f in INT_ARGS:
        return _int_series(f, values)
    if f in STR_ARGS:
        return _str_series(f, values)
    if f == "occupancy":
        return pl.Series(f, [v if isinstance(v, (int, float)) else None for v in values], dtype=pl.Float64, strict=False)
    if f in ("grid", "block"):
        dims = [pl.Series(list(map(attrgetter(axis), values)), dtype=pl.Int64) for axis in ("x", "y", "z")]
        total = dims[0] * dims[1] * dims[2]
        return pl.select(pl.when(pl.lit(total) > 0).then(pl.lit(total)).otherwise(None)).to_series().alias(f)
    if f in ("input_dims", "input_types", "concrete_inputs"):
        return pl.Series(f, [bytes(v).decode("utf-8", "replace") if v else None for v in values], dtype=pl.String)
    if f == "pg_ranks":
        return pl.Series(f, [_rank_list_text(bytes(v)) if v else None for v in values], dtype=pl.String)
    return _str_series(f, values)


def _rank_list_text(raw: bytes) -> str | None:
    """``Process Group Ranks`` as compact JSON list text (``[0,1]``): PyTorch writes the list
    as a string (``"[0, 1]"``), other writers as a JSON array."""
    text = raw.decode("utf-8", "replace").strip()
    if text.startswith('"'):
        try:
            text = str(msgspec.json.decode(raw))
        except msgspec.DecodeError:
            return None
    text = text.replace(" ", "")
    return text if text.startswith("[") and text.endswith("]") else None


def _str_series(name: str, values: list[Any]) -> pl.Series:
    try:
        return pl.Series(name, values, dtype=pl.String)
    except (TypeError, ValueError, OverflowError):
        return pl.Series(name, values, dtype=pl.String, strict=False)


def _int_series(name: str, values: list[Any]) -> pl.Series:
    """Integers; numeric strings and integral floats are converted, anything else is null."""
    try:
        return pl.Series(name, values, dtype=pl.Int64)
    except (TypeError, ValueError, OverflowError):
        pass
    text = pl.Series(name, values, dtype=pl.String, strict=False).str.strip_chars()
    as_int = text.cast(pl.Int64, strict=False)
    as_float = text.cast(pl.Float64, strict=False)
    in_range = as_float.is_finite() & (as_float.abs() < 2.0**63)
    from_float = pl.select(pl.when(pl.lit(in_range)).then(pl.lit(as_float)).otherwise(None).cast(pl.Int64)).to_series()
    result: pl.Series = as_int.fill_null(from_float).alias(name)
    return result


def as_int(v: Any) -> int | None:
    """One value → int64 or None (used for top-level metadata, not per event)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else None
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and abs(v) < 2**63 else None
    if isinstance(v, str):
        try:
            n = int(v.strip(), 0)
        except ValueError:
            try:
                f = float(v)
            except ValueError:
                return None
            return int(f) if math.isfinite(f) and abs(f) < 2**63 else None
        return n if -(2**63) <= n < 2**63 else None
    return None


def _id_series(name: str, values: list[Any]) -> tuple[pl.Series, pl.Series]:
    """pid/tid/id: ints, or strings ("Spans", "stream 7", "24572"); returns (ints, labels).

    Numeric strings become ints; other strings stay as labels (mapped to synthetic ids later).
    """
    try:
        return pl.Series(name, values, dtype=pl.Int64), pl.Series(name + "_label", [None] * len(values), dtype=pl.String)
    except (TypeError, ValueError, OverflowError):
        pass
    text = pl.Series(name, values, dtype=pl.String, strict=False)
    ints = text.str.strip_chars().cast(pl.Int64, strict=False)
    labels = pl.select(pl.when(pl.lit(ints).is_null()).then(pl.lit(text)).otherwise(None)).to_series()
    return ints.alias(name), labels.alias(name + "_label")


def time_series(name: str, values: list[Any]) -> pl.Series:
    """µs timestamps (int, float with ns fraction, or numeric string) → integer ns."""
    try:
        return pl.Series(name, values, dtype=pl.Int64) * 1000
    except (TypeError, ValueError, OverflowError):
        pass
    return float_time_series(name, values)


def float_time_series(name: str, values: list[Any]) -> pl.Series:
    """The float64 branch of :func:`time_series` (a chunk with a float time in it)."""
    try:
        floats = pl.Series(name, values, dtype=pl.Float64)
    except (TypeError, ValueError, OverflowError):
        floats = pl.Series(name, values, dtype=pl.Float64, strict=False)
    return pl.select(us_to_ns(pl.lit(floats))).to_series().alias(name)


def us_to_ns(us: pl.Expr) -> pl.Expr:
    """Float µs → int ns, exact for the 3-decimal values Kineto writes; non-finite → null."""
    finite = us.is_finite() & (us.abs() < 9.2e15)
    whole = us.floor()
    ns = whole.cast(pl.Int64, strict=False) * 1000 + ((us - whole) * 1000).round().cast(pl.Int64, strict=False)
    return pl.when(finite).then(ns).otherwise(None)
