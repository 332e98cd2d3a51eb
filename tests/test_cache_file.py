"""The cache's entries (tracekit/reading/cache.py): one Arrow IPC file per table, read back
identical, and a damaged, truncated, foreign or hostile file is dropped and parsed again, never
trusted and never a crash."""

from __future__ import annotations

import dataclasses
import gc
import json
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import SAMPLE_TRACES
from polars.testing import assert_frame_equal

from tracekit.parsers import parse
from tracekit.reading import cache as tk_cache
from tracekit.schema import TABLES, TraceTables

TRACES = ["synthetic/healthy.kineto.json", "synthetic/dataloader_stall.nsys.sqlite"]
#: every sample trace tracekit reads as one file
EVERY_TRACE = sorted(
    p.relative_to(SAMPLE_TRACES).as_posix()
    for pattern in ("synthetic/*.kineto.json", "synthetic/*.nsys.sqlite", "captures/*/*.pt.trace.json.gz")
    for p in SAMPLE_TRACES.glob(pattern)
)


def _entry(tables: TraceTables, name: str = TRACES[0]) -> tuple[str, Path]:
    """``tables`` stored under the key of sample trace ``name``: (the key, the entry's folder)."""
    key = tk_cache.content_key(SAMPLE_TRACES / name)
    assert tk_cache.store(key, tables)
    return key, tk_cache.entry_dir(key)


def _same(a: TraceTables, b: TraceTables) -> None:
    for schema in TABLES:
        assert b.table(schema.name).schema == schema.polars_schema
        assert_frame_equal(a.table(schema.name), b.table(schema.name), check_exact=True)
    assert a.info == b.info


@pytest.fixture(scope="module")
def kineto_tables() -> TraceTables:
    return parse(SAMPLE_TRACES / TRACES[0])


def test_every_sample_trace_reads_back_identical() -> None:
    """Every table of every sample trace (Kineto, Nsight, captures) and its info: stored, then
    loaded with the same dtypes (Enums included) and the same values."""
    assert len(EVERY_TRACE) > 20
    for name in EVERY_TRACE:
        path = SAMPLE_TRACES / name
        tables = parse(path)
        key = tk_cache.content_key(path)
        assert tk_cache.store(key, tables), name
        back = tk_cache.load(key, path)
        assert back is not None, name
        _same(tables, back)


def test_an_entry_is_one_arrow_file_per_table(kineto_tables: TraceTables) -> None:
    """Any Arrow reader opens the files: each holds one record batch of its table."""
    _, entry = _entry(kineto_tables)
    assert sorted(p.name for p in entry.iterdir()) == sorted([f"{s.name}.arrow" for s in TABLES] + ["complete"])
    for schema in TABLES:
        with pa.memory_map(str(entry / f"{schema.name}.arrow")) as source:
            reader = pa.ipc.open_file(source)
            assert reader.num_record_batches == 1
            assert reader.schema.names == schema.names
            assert reader.read_all().num_rows == kineto_tables.table(schema.name).height


def test_distinct_strings_are_stored_once(kineto_tables: TraceTables) -> None:
    # the parser already shares one copy of each name (they are gathered from the distinct
    # names); rebuilt from Python strings, the column holds a long name once per row, which
    # is what the writer must not write out
    names = pl.Series("name", kineto_tables.events["name"].to_list(), dtype=pl.String)
    tables = dataclasses.replace(kineto_tables, events=kineto_tables.events.with_columns(names))
    exported = names.to_arrow(compat_level=pl.CompatLevel.newest())
    per_row = sum(b.size for b in exported.buffers()[2:] if b is not None)
    distinct = names.unique().str.len_bytes().sum()
    key, entry = _entry(tables)
    stored = sum(size for _, size in _buffers(entry / "events.arrow", "name")[2:])
    assert stored == distinct < per_row
    back = tk_cache.load(key, SAMPLE_TRACES / TRACES[0])
    assert back is not None
    _same(tables, back)


def test_cached_tables_outlive_their_entry(kineto_tables: TraceTables) -> None:
    """The files are mapped: the tables stay valid after the entry is deleted."""
    key, _ = _entry(kineto_tables)
    back = tk_cache.load(key, SAMPLE_TRACES / TRACES[0])
    assert back is not None
    assert tk_cache.clear() == 1
    gc.collect()
    kernels = pl.col("kind") == "kernel"
    assert back.events.filter(kernels).height == kineto_tables.events.filter(kernels).height
    assert back.events["name"].to_list() == kineto_tables.events["name"].to_list()


# --------------------------------------------------------------------------- damage


#: how the reader refuses a file: its own checks, pyarrow's, a missing file, bad JSON or info
_REFUSED = (tk_cache._Damaged, pa.ArrowException, OSError, ValueError, TypeError)


def _read_or_refused(key: str, entry: Path) -> dict[str, pl.DataFrame] | None:
    """The tables the entry reads back as, or None when the reader refuses it."""
    try:
        _, frames = tk_cache._read_tables(entry, key)
    except _REFUSED:
        return None
    return frames


def _buffers(file: Path, column: str, part: str = "") -> list[tuple[int, int]]:
    """(offset in the file, size) of each buffer of ``column`` of the table in ``file`` (of its
    dictionary's, or its codes', with ``part``); (-1, 0) for a buffer that is absent."""
    with pa.memory_map(str(file)) as source:
        base = source.read_buffer().address  # the whole mapping; the batch's buffers lie in it
        array = pa.ipc.open_file(source).get_batch(0).column(column)
    if part:
        array = getattr(array, part)
    return [(-1, 0) if b is None else (b.address - base, b.size) for b in array.buffers()]


def _poke(file: Path, offset: int, data: bytes) -> None:
    with open(file, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def _rewrite(file: Path, change: Callable[[list[pa.Field], list[pa.Array], dict[bytes, bytes]], Any]) -> None:
    """Write ``file`` again after ``change`` edited its fields, arrays and schema metadata in
    place (an Arrow writer writes what it is given: arrays are not validated)."""
    reader = pa.ipc.open_file(pa.py_buffer(file.read_bytes()))  # a copy: the file is written over
    batch = reader.get_batch(0)
    fields, arrays, metadata = list(batch.schema), list(batch.columns), dict(reader.schema.metadata or {})
    change(fields, arrays, metadata)
    schema = pa.schema(fields, metadata=metadata)
    rebuilt = pa.RecordBatch.from_arrays(arrays, schema=schema)
    with pa.OSFile(str(file), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(rebuilt)


def _column(name: str, make: Callable[[pa.Field, pa.Array], tuple[pa.Field, pa.Array]]) -> Callable[..., None]:
    """A :func:`_rewrite` change that replaces the events column ``name`` by ``make(field, array)``."""

    def change(fields: list[pa.Field], arrays: list[pa.Array], metadata: dict[bytes, bytes]) -> None:
        i = [f.name for f in fields].index(name)
        fields[i], arrays[i] = make(fields[i], arrays[i])

    return change


def _cast(name: str, typ: pa.DataType) -> Callable[..., None]:
    return _column(name, lambda f, a: (pa.field(f.name, typ), pc.cast(a, typ, safe=False)))


def _text(array: pa.Array) -> pa.Array:
    """An Enum's dictionary-encoded ``array`` as string views (Arrow cannot take views)."""
    return pl.Series(array).cast(pl.String).to_arrow(compat_level=pl.CompatLevel.newest())


def _views(array: pa.Array, row: int, view: bytes) -> pa.Array:
    """A string-view ``array`` whose row ``row`` has the 16-byte ``view`` (not validated)."""
    validity, views, *data = array.buffers()
    raw = bytearray(views.to_pybytes())
    raw[16 * row : 16 * row + 16] = view
    return pa.Array.from_buffers(pa.string_view(), len(array), [validity, pa.py_buffer(bytes(raw)), *data], array.null_count)


def _long_name(file: Path) -> tuple[int, int, int]:
    """(file offset of the view, string length, file offset of the data) of the first long name."""
    views = _buffers(file, "name")
    raw = file.read_bytes()
    for i in range(views[1][1] // 16):
        size, _, index, offset = struct.unpack_from("<i4sii", raw, views[1][0] + 16 * i)
        if size > 12:
            return views[1][0] + 16 * i, size, views[2 + index][0] + offset
    raise AssertionError("no long name in the sample")


def _nodes(file: Path, rows: int) -> int:
    """File offset of the events batch's field nodes (length and null count of each column)."""
    raw = file.read_bytes()
    at = raw.find(struct.pack("<qq", rows, 0) * 3)  # event_id, kind and name: no nulls
    # a flatbuffer vector follows its length: one node per column
    assert at > 0
    assert struct.unpack_from("<I", raw, at - 4)[0] == len(TABLES[0].columns)
    return at


def _metadata(key: bytes, value: bytes | None) -> Callable[..., None]:
    def change(fields: list[pa.Field], arrays: list[pa.Array], metadata: dict[bytes, bytes]) -> None:
        if value is None:
            del metadata[key]
        else:
            metadata[key] = value

    return change


def _stamp_with(**changes: Any) -> Callable[..., None]:
    def change(fields: list[pa.Field], arrays: list[pa.Array], metadata: dict[bytes, bytes]) -> None:
        metadata[tk_cache._STAMP] = json.dumps({**json.loads(metadata[tk_cache._STAMP]), **changes}, sort_keys=True).encode()

    return change


def _damage_cases() -> dict[str, Callable[[Path, int], None]]:
    """Each case damages an entry's events file (or the entry), given its row count."""

    def rewrite(change: Callable[..., None]) -> Callable[[Path, int], None]:
        return lambda file, rows: _rewrite(file, change)

    def truncated(file: Path, rows: int) -> None:
        with open(file, "r+b") as fh:
            fh.truncate(file.stat().st_size // 2)

    def footer_cut(file: Path, rows: int) -> None:
        with open(file, "r+b") as fh:
            fh.truncate(file.stat().st_size - 6)

    def two_batches(file: Path, rows: int) -> None:
        reader = pa.ipc.open_file(pa.py_buffer(file.read_bytes()))
        batch, schema = reader.get_batch(0), reader.schema
        with pa.OSFile(str(file), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_batch(batch)
            writer.write_batch(batch)

    def plain_arrow(file: Path, rows: int) -> None:
        pl.read_ipc(file).write_ipc(file)  # polars' own file of the same table, without the stamp

    def another_table(file: Path, rows: int) -> None:
        shutil.copy(file.parent / "links.arrow", file)

    def missing_table(file: Path, rows: int) -> None:
        (file.parent / "memory.arrow").unlink()

    def views_into_no_buffer(file: Path, rows: int) -> None:
        # a 200-byte string in data buffer 7 (there is no such buffer)
        view = struct.pack("<i4sii", 200, b"abcd", 7, 0)
        _rewrite(file, _column("name", lambda f, a: (f, _views(a, 0, view))))

    def view_past_its_buffer(file: Path, rows: int) -> None:
        view = struct.pack("<i4sii", 200, b"abcd", 0, 2**31 - 300)
        _rewrite(file, _column("name", lambda f, a: (f, _views(a, 0, view))))

    def not_utf8(file: Path, rows: int) -> None:
        _, _, data = _long_name(file)
        _poke(file, data + 5, b"\xff\xfe")

    def split_character(file: Path, rows: int) -> None:
        _, size, data = _long_name(file)
        # the string now ends on the first byte of a two-byte character
        _poke(file, data + size - 1, "é".encode()[:1])

    def prefix_bad(file: Path, rows: int) -> None:
        view, _, _ = _long_name(file)
        _poke(file, view + 4, b"\x00\x01\x02\x03")

    def inline_not_utf8(file: Path, rows: int) -> None:
        view, _, _ = _long_name(file)
        _poke(file, view, struct.pack("<i", 4) + b"a\xffbc" + bytes(8))

    def code_bad(file: Path, rows: int) -> None:
        _poke(file, _buffers(file, "kind", "indices")[1][0], b"\xff")

    def code_one_past_the_end(file: Path, rows: int) -> None:
        # the last row's code equals the dictionary's length: one past its last category
        with pa.memory_map(str(file)) as source:
            categories = len(pa.ipc.open_file(source).get_batch(0).column("kind").dictionary)
        _poke(file, _buffers(file, "kind", "indices")[1][0] + rows - 1, bytes([categories]))

    def null_count(file: Path, rows: int) -> None:
        _poke(file, _nodes(file, rows) + 8, struct.pack("<q", 1))  # event_id: one null, no bitmap

    def nulls_miscounted(file: Path, rows: int) -> None:
        # tid has a validity bitmap and nulls: one more than it holds
        at = _nodes(file, rows) + 16 * TABLES[0].names.index("tid")
        (length, nulls) = struct.unpack_from("<qq", file.read_bytes(), at)
        assert length == rows
        assert 0 < nulls < rows
        _poke(file, at + 8, struct.pack("<q", nulls + 1))

    def one_length(file: Path, rows: int) -> None:
        _poke(file, _nodes(file, rows), struct.pack("<q", rows + 1))

    def every_length(file: Path, rows: int) -> None:
        # the batch's length and every column's: the buffers are then a row short
        raw = bytearray(file.read_bytes())
        body = min(offset for offset, _ in _buffers(file, "event_id") if offset >= 0)
        old, new = struct.pack("<q", rows), struct.pack("<q", rows + 1)
        assert raw[:body].count(old) > 10
        file.write_bytes(bytes(raw[:body].replace(old, new) + raw[body:]))

    def field_of(name: str, make: Callable[[pa.Field], pa.Field]) -> Callable[[Path, int], None]:
        return rewrite(_column(name, lambda f, a: (make(f), a)))

    def swapped(fields: list[pa.Field], arrays: list[pa.Array], metadata: dict[bytes, bytes]) -> None:
        fields[1], fields[2] = fields[2], fields[1]
        arrays[1], arrays[2] = arrays[2], arrays[1]

    def dropped(fields: list[pa.Field], arrays: list[pa.Array], metadata: dict[bytes, bytes]) -> None:
        del fields[-1], arrays[-1]

    def added(fields: list[pa.Field], arrays: list[pa.Array], metadata: dict[bytes, bytes]) -> None:
        fields.append(pa.field("extra", pa.int64()))
        arrays.append(arrays[0])

    enum_values = tk_cache._ENUM_VALUES
    return {
        "garbage": lambda file, rows: file.write_bytes(b"not a cache file at all"),
        "empty": lambda file, rows: file.write_bytes(b""),
        "cut in the schema": lambda file, rows: file.write_bytes(file.read_bytes()[:40]),
        "truncated": truncated,
        "footer cut": footer_cut,
        "two record batches": two_batches,
        "a plain Arrow file of the table": plain_arrow,
        "another table's file": another_table,
        "a table file missing": missing_table,
        "another entry's file": rewrite(_stamp_with(key="0" * 40)),
        "another tracekit": rewrite(_stamp_with(tracekit="0.0.0")),
        "another schema version": rewrite(_stamp_with(schema=-1)),
        "another layout": rewrite(_stamp_with(cache=-1)),
        "no trace info": rewrite(_metadata(tk_cache._INFO, None)),
        "trace info not JSON": rewrite(_metadata(tk_cache._INFO, b"{")),
        "trace info not UTF-8": rewrite(_metadata(tk_cache._INFO, b'{"path": "\xac"}')),
        "trace info of another shape": rewrite(_metadata(tk_cache._INFO, b'{"path": 1, "nope": 2}')),
        "another dtype": rewrite(_cast("start_ns", pa.uint64())),
        "floats for integers": rewrite(_cast("start_ns", pa.float64())),
        "enum codes as text": rewrite(_column("kind", lambda f, a: (pa.field(f.name, pa.string_view()), _text(a)))),
        "enum categories": field_of("kind", lambda f: f.with_metadata({enum_values: b"1;x1;y"})),
        "enum without categories": field_of("kind", lambda f: f.with_metadata({})),
        "metadata on a number": field_of("start_ns", lambda f: f.with_metadata({enum_values: b"1;x"})),
        "column name": field_of("start_ns", lambda f: f.with_name("end_ns")),
        "columns out of order": rewrite(swapped),
        "a column missing": rewrite(dropped),
        "an extra column": rewrite(added),
        "first column not stored": rewrite(_column("event_id", lambda f, a: (pa.field(f.name, pa.null()), pa.nulls(len(a))))),
        "views into no buffer": views_into_no_buffer,
        "view past its buffer": view_past_its_buffer,
        "string not UTF-8": not_utf8,
        "inline string not UTF-8": inline_not_utf8,
        "view prefix": prefix_bad,
        "string ends inside a character": split_character,
        "dictionary code": code_bad,
        "dictionary code one past the end": code_one_past_the_end,
        "null count without a bitmap": null_count,
        "null count against its bitmap": nulls_miscounted,
        "one column's length": one_length,
        "every length": every_length,
    }


@pytest.mark.parametrize("case", list(_damage_cases()))
def test_a_damaged_cache_file_is_dropped(case: str, kineto_tables: TraceTables) -> None:
    key, entry = _entry(kineto_tables)
    _damage_cases()[case](entry / "events.arrow", kineto_tables.events.height)
    with pytest.raises(_REFUSED):  # refused by a check: never a panic (polars' are no Exception)
        tk_cache._read_tables(entry, key)
    assert tk_cache.load(key, SAMPLE_TRACES / TRACES[0]) is None
    assert not entry.exists()  # dropped: the next read_trace parses and stores again
    # (tests/test_cli_and_cache.py::test_damaged_cache_entry_is_rebuilt reads it through)


def test_a_file_cut_anywhere_is_refused(kineto_tables: TraceTables) -> None:
    """A file cut short at any point (a full disk, a crash without the rename's guarantee) is
    refused: the footer and every buffer's place are checked against the file's size."""
    key, entry = _entry(kineto_tables)
    for name in ("events", "flows"):
        file = entry / f"{name}.arrow"
        whole = file.read_bytes()
        for size in sorted({*range(0, len(whole), max(1, len(whole) // 23)), len(whole) - 1}):
            file.write_bytes(whole[:size])
            assert _read_or_refused(key, entry) is None, (name, size)
        file.write_bytes(whole)
    assert _read_or_refused(key, entry) is not None


def test_the_layout_version_is_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry of another layout (the one-file entries before this one) is never read."""
    path = SAMPLE_TRACES / TRACES[0]
    key = tk_cache.content_key(path)
    monkeypatch.setattr(tk_cache, "CACHE_FORMAT", tk_cache.CACHE_FORMAT + 1)
    assert tk_cache.content_key(path) != key


def test_random_damage_never_crashes() -> None:
    """Bytes changed at random (mostly in the buffers, some in the schema and footer): each
    entry is either refused or read into tables that polars can use whole (numbers may
    differ, as in any uncompressed format), never a crash or a panic."""
    path = SAMPLE_TRACES / TRACES[1]
    tables = parse(path)
    key, entry = _entry(tables, TRACES[1])
    file = entry / "events.arrow"
    raw = file.read_bytes()
    body = min(offset for offset, _ in _buffers(file, "event_id") if offset >= 0)
    rng = random.Random(17)
    outcomes = {"refused": 0, "read": 0}
    for _ in range(60):
        data = bytearray(raw)
        for _ in range(rng.choice([1, 2, 8])):
            data[rng.randrange(body, len(data)) if rng.random() < 0.7 else rng.randrange(0, body)] = rng.randrange(256)
        file.write_bytes(bytes(data))
        try:
            _, frames = tk_cache._read_tables(entry, key)
        except Exception:  # refused (a panic is no Exception: it fails the test)
            outcomes["refused"] += 1
            continue
        outcomes["read"] += 1
        for frame in frames.values():
            for column in frame.columns:
                series = frame.get_column(column)
                series.cast(pl.String).to_list() if not series.dtype.is_numeric() else series.sum()
    assert outcomes["refused"], outcomes
    assert outcomes["read"], outcomes


def _null_kinds(tables: TraceTables) -> TraceTables:
    """``tables`` with the events' memcpy kinds all null: an Enum column of nulls only."""
    nulls = pl.Series("memcpy_kind", [None] * tables.events.height, dtype=tables.events.schema["memcpy_kind"])
    return dataclasses.replace(tables, events=tables.events.with_columns(nulls))


def test_columns_of_nulls_are_not_stored(kineto_tables: TraceTables) -> None:
    """A column that holds only nulls (but a table's first) is written as Arrow's null type,
    with no buffers; it reads back with its dtype, and polars can compute on it and copy it."""
    tables = _null_kinds(kineto_tables)
    key, entry = _entry(tables)
    with pa.memory_map(str(entry / "events.arrow")) as source:
        schema = pa.ipc.open_file(source).schema
    typed = {f.name: not pa.types.is_null(f.type) for f in schema}
    nulls = [c for c in tables.events.columns if tables.events.get_column(c).null_count() == tables.events.height]
    assert "memcpy_kind" in nulls
    assert typed == {c: c not in nulls for c in tables.events.columns}
    # an empty table stores every column with its type (no buffer holds anything)
    for table in TABLES:
        if not tables.table(table.name).height:
            with pa.memory_map(str(entry / f"{table.name}.arrow")) as source:
                assert not any(pa.types.is_null(f.type) for f in pa.ipc.open_file(source).schema), table.name
    back = tk_cache.load(key, SAMPLE_TRACES / TRACES[0])
    assert back is not None
    _same(tables, back)
    events = back.events
    for name in nulls:
        column = events.get_column(name)
        assert column.null_count() == events.height
        filled = column.fill_null(column.dtype.categories[0] if isinstance(column.dtype, pl.Enum) else "x" if column.dtype == pl.String else 1)
        assert filled.null_count() == 0
        grown = column.clone()
        grown.append(column)
        grown.extend(column)
        assert grown.len() == 3 * events.height
        assert grown.null_count() == grown.len()
        assert column.scatter([0], None).null_count() == events.height
    assert events.select(pl.col("memcpy_kind").cast(pl.String).is_null().all()).item()
    assert events.group_by("memcpy_kind").len().height == 1
    assert events.vstack(events).height == 2 * events.height


@pytest.mark.parametrize("row", [0, 5, 7, 8, 9, 15, 16, -9, -8, -2, -1])
def test_every_dictionary_code_is_checked(row: int, kineto_tables: TraceTables) -> None:
    """A code past the dictionary is refused wherever it sits; the largest valid code is read."""
    key, entry = _entry(kineto_tables)
    file = entry / "events.arrow"
    n = len(kineto_tables.events.schema["kind"].categories)  # type: ignore[attr-defined]
    at = _buffers(file, "kind", "indices")[1][0] + (row % kineto_tables.events.height)
    whole = file.read_bytes()
    for code, good in [(n - 1, True), (n, False), (127, False), (128, False), (255, False)]:
        file.write_bytes(whole)
        _poke(file, at, bytes([code]))
        frames = _read_or_refused(key, entry)
        assert (frames is not None) == good, code
        if frames is not None:
            assert frames["events"]["kind"][row] == kineto_tables.events.schema["kind"].categories[n - 1]  # type: ignore[attr-defined]


def test_inline_strings_are_read_as_utf8(kineto_tables: TraceTables) -> None:
    """A short (inline) string: ASCII and multi-byte UTF-8 are taken; a byte that is not
    UTF-8 is refused, and so are bytes past its length that are not zeros (Arrow's
    validation asks for zero padding, which polars writes)."""
    key, entry = _entry(kineto_tables)
    file = entry / "events.arrow"
    view = _buffers(file, "name")[1][0]
    for text, padding, good in [
        (b"abc", b"", True), ("héllo".encode(), b"", True), (b"ab", b"\xff\xfe", False),
        (b"twelve bytes", b"", True), (b"a\xffb", b"", False), (b"ab\xc3", b"", False),
    ]:  # fmt: skip
        _poke(file, view, len(text).to_bytes(4, "little") + (text + padding).ljust(12, b"\0"))
        frames = _read_or_refused(key, entry)
        assert (frames is not None) == good, text
        if frames is not None:
            assert frames["events"]["name"][0] == text.decode()


_OTHER_TYPES = [
    pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.int32(), pa.uint32(), pa.int64(), pa.uint64(),
    pa.float32(), pa.float64(), pa.bool_(), pa.string_view(), pa.string(), pa.large_string(), pa.binary_view(),
    pa.null(), pa.dictionary(pa.uint8(), pa.string_view()), pa.dictionary(pa.int32(), pa.string()), pa.timestamp("ns"),
]  # fmt: skip


def test_a_file_of_another_schema_is_refused_or_reads_back_as_the_schema(kineto_tables: TraceTables) -> None:
    """A column written with any other Arrow type is refused, never read as another dtype: only
    its own type is taken (an Enum: any integer codes into string views), or Arrow's null type
    for a column of nulls (not the first)."""
    key, entry = _entry(kineto_tables)
    file = entry / "events.arrow"
    whole = file.read_bytes()
    own = {"event_id": pa.int64(), "rank": pa.int32(), "name": pa.string_view(), "tid": pa.int64()}

    def taken(name: str, typ: pa.DataType) -> bool:
        if name == "kind":
            return pa.types.is_dictionary(typ) and typ.value_type == pa.string_view() and typ.index_type == pa.uint8()
        return typ == own[name] or (pa.types.is_null(typ) and name != "event_id")

    for name in [*own, "kind"]:
        for typ in _OTHER_TYPES:
            file.write_bytes(whole)

            def make(field: pa.Field, array: pa.Array, typ: pa.DataType = typ) -> tuple[pa.Field, pa.Array]:
                try:
                    return pa.field(field.name, typ, metadata=field.metadata), pc.cast(array, typ)
                except (pa.ArrowException, ValueError):
                    return pa.field(field.name, typ, metadata=field.metadata), pa.nulls(len(array), typ)

            _rewrite(file, _column(name, make))
            frames = _read_or_refused(key, entry)
            assert (frames is not None) == taken(name, typ), (name, typ)
            if frames is not None:
                assert frames["events"].schema == TABLES[0].polars_schema, (name, typ)
                if pa.types.is_null(typ):
                    assert frames["events"][name].null_count() == kineto_tables.events.height
