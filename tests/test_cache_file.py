"""The cache's one-file entries (tracekit/reading/cache.py): read back identical on both readers
(the memory-mapping native one, tracekit/native/_colmap.c, and the pyarrow fallback), and a damaged
or hostile file is dropped and parsed again, never trusted and never a crash."""

from __future__ import annotations

import dataclasses
import gc
import json
import random
import struct
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import SAMPLE_TRACES
from polars.testing import assert_frame_equal

from tracekit.parsers import parse
from tracekit.reading import cache as tk_cache
from tracekit.schema import TABLES, TraceTables

NATIVE = tk_cache._native() is not None
READERS = [pytest.param("native", marks=pytest.mark.skipif(not NATIVE, reason="tracekit.native._colmap not built")), "python"]
TRACES = ["synthetic/healthy.kineto.json", "synthetic/dataloader_stall.nsys.sqlite"]


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("TRACEKIT_PURE_PYTHON", raising=False)
    return str(request.param)


def _stored(name: str) -> tuple[Path, TraceTables, Path]:
    path = SAMPLE_TRACES / name
    tables = parse(path)
    key = tk_cache.content_key(path)
    assert tk_cache.store(key, tables)
    return path, tables, tk_cache.entry_dir(key) / "tables.tkc"


def _same(a: TraceTables, b: TraceTables) -> None:
    for schema in TABLES:
        assert b.table(schema.name).schema == schema.polars_schema
        assert_frame_equal(a.table(schema.name), b.table(schema.name), check_exact=True)
    assert a.info == b.info


@pytest.mark.parametrize("name", TRACES)
def test_cached_tables_read_back_identical(name: str, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Written by either writer (the native one stores each distinct string once), read back
    the same by either reader."""
    path, tables, _ = _stored(name)
    for value in ("native", "python"):
        if value == "native" and not NATIVE:
            continue
        if value == "python":
            monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
        else:
            monkeypatch.delenv("TRACEKIT_PURE_PYTHON", raising=False)
        back = tk_cache.load(tk_cache.content_key(path), path)
        assert back is not None, (reader, value)
        _same(tables, back)


@pytest.mark.skipif(not NATIVE, reason="tracekit.native._colmap not built")
def test_distinct_strings_are_stored_once(monkeypatch: pytest.MonkeyPatch) -> None:
    path = SAMPLE_TRACES / TRACES[0]
    parsed = parse(path)
    # the parser already shares one copy of each name (they are gathered from the distinct
    # names); rebuilt from Python strings, the column stores a long name once per row, which
    # is what a writer without de-duplication writes out
    names = pl.Series("name", parsed.events["name"].to_list(), dtype=pl.String)
    tables = dataclasses.replace(parsed, events=parsed.events.with_columns(names))
    long_bytes = names.filter(names.str.len_bytes() > 12).unique().str.len_bytes().sum()
    sizes = {}
    for reader in ("native", "python"):
        if reader == "python":
            monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
        folder = tk_cache.cache_dir() / reader
        folder.mkdir(parents=True)
        tk_cache._write_tables(folder / "tables.tkc", tables)
        header, _ = tk_cache._read_header(folder / "tables.tkc")
        sizes[reader] = sum(b[1] for b in _column(header, "events", "name")["buffers"][2:])
    assert sizes["native"] == long_bytes < sizes["python"]


def test_cached_tables_outlive_their_entry(reader: str) -> None:
    """The native reader maps the file: the tables stay valid after the entry is deleted."""
    path, tables, _ = _stored(TRACES[0])
    back = tk_cache.load(tk_cache.content_key(path), path)
    assert back is not None
    assert tk_cache.clear() == 1
    gc.collect()
    assert back.events.filter(pl.col("kind") == "kernel").height == tables.events.filter(pl.col("kind") == "kernel").height
    assert back.events["name"].to_list() == tables.events["name"].to_list()


def _cache_file(name: str, tables: TraceTables) -> Path:
    """``tables`` written to the cache file ``name`` in the cache folder (no entry around it)."""
    file = tk_cache.cache_dir() / name
    file.parent.mkdir(parents=True, exist_ok=True)
    tk_cache._write_tables(file, tables)
    return file


def _read_or_refused(file: Path) -> dict[str, pl.DataFrame] | None:
    """The tables ``file`` reads back as, or None when the reader refuses it (ValueError)."""
    try:
        _, frames = tk_cache._read_tables(file)
    except ValueError:
        return None
    return frames


def _header(file: Path) -> tuple[dict[str, Any], int]:
    return tk_cache._read_header(file)


def _rewrite_header(file: Path, change: Any) -> None:
    """Apply ``change`` to the file's header, keeping the buffers where they are."""
    raw = file.read_bytes()
    header, start = _header(file)
    change(header)
    size = int.from_bytes(raw[8:16], "little")
    text = json.dumps(header).encode()
    text += b" " * (size - len(text))  # JSON may end in blanks: the buffers stay where they are
    assert tk_cache._align(16 + len(text)) == start, "the edit must keep the header's padded size"
    file.write_bytes(raw[:8] + len(text).to_bytes(8, "little") + text + b"\0" * (start - 16 - len(text)) + raw[start:])


def _column(header: dict[str, Any], table: str, name: str) -> dict[str, Any]:
    (t,) = [t for t in header["tables"] if t["name"] == table]
    (c,) = [c for c in t["columns"] if c["name"] == name]
    return c


def _poke(file: Path, offset: int, data: bytes) -> None:
    with open(file, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def _damage_cases() -> dict[str, Any]:
    def header_edit(fn: Any) -> Any:
        return lambda file: _rewrite_header(file, fn)

    def buffer_far(h: dict[str, Any]) -> None:
        _column(h, "events", "start_ns")["buffers"][1][0] = 10**12

    def buffer_long(h: dict[str, Any]) -> None:
        _column(h, "events", "start_ns")["buffers"][1][1] = 10**12

    def nulls_wrong(h: dict[str, Any]) -> None:
        c = _column(h, "events", "event_id")
        c["null_count"] = 1  # no validity bitmap, or one that counts no null

    def rows_wrong(h: dict[str, Any]) -> None:
        for c in h["tables"][0]["columns"]:
            c["length"] += 1

    def views_bad(file: Path) -> None:
        header, start = _header(file)
        views = _column(header, "events", "name")["buffers"][1]
        # first view: a 200-byte string in data buffer 7 (there is no such buffer)
        _poke(file, start + views[0], (200).to_bytes(4, "little") + b"abcd" + (7).to_bytes(4, "little") + (0).to_bytes(4, "little"))

    def view_past_end(file: Path) -> None:
        header, start = _header(file)
        views = _column(header, "events", "name")["buffers"][1]
        _poke(file, start + views[0], (200).to_bytes(4, "little") + b"abcd" + (0).to_bytes(4, "little") + (2**31 - 300).to_bytes(4, "little"))

    def _long_view(file: Path) -> tuple[int, int, int, int]:
        """(view's file offset, string length, its data's file offset, row) of the first long name."""
        header, start = _header(file)
        col = _column(header, "events", "name")
        views = start + col["buffers"][1][0]
        raw = file.read_bytes()
        for i in range(col["length"]):
            size, _, index, offset = struct.unpack_from("<i4sii", raw, views + 16 * i)
            if size > 12:
                return views + 16 * i, size, start + col["buffers"][2 + index][0] + offset, i
        raise AssertionError("no long name in the sample")

    def not_utf8(file: Path) -> None:
        _, _, data, _ = _long_view(file)
        _poke(file, data + 5, b"\xff\xfe")

    def split_character(file: Path) -> None:
        _, size, data, _ = _long_view(file)
        # the buffer stays UTF-8, but the string now ends on the first byte of "é"
        _poke(file, data + size - 1, "é".encode())

    def prefix_bad(file: Path) -> None:
        view, _, _, _ = _long_view(file)
        _poke(file, view + 4, b"\x00\x01\x02\x03")

    def inline_not_utf8(file: Path) -> None:
        view, _, _, _ = _long_view(file)
        _poke(file, view, (4).to_bytes(4, "little") + b"a\xffbc")

    def index_bad(file: Path) -> None:
        header, start = _header(file)
        indices = _column(header, "events", "kind")["buffers"][1]
        _poke(file, start + indices[0], b"\xff")

    def index_at_the_end(file: Path) -> None:
        # the last row's code equals the dictionary's length: one past its last category
        header, start = _header(file)
        col = _column(header, "events", "kind")
        _poke(file, start + col["buffers"][1][0] + col["length"] - 1, bytes([col["dictionary"]["length"]]))

    def nulls_with_values(h: dict[str, Any]) -> None:
        c = _column(h, "events", "domain")  # a column of nulls only: no buffers
        assert c["buffers"] is None
        c["null_count"] -= 1

    def first_not_stored(h: dict[str, Any]) -> None:
        c = _column(h, "events", "event_id")
        c.update(buffers=None, null_count=c["length"])

    def columns_swapped(h: dict[str, Any]) -> None:
        cols = h["tables"][0]["columns"]
        cols[1], cols[2] = cols[2], cols[1]

    def truncated(file: Path) -> None:
        with open(file, "r+b") as fh:
            fh.truncate(file.stat().st_size // 2)

    return {
        "garbage": lambda file: file.write_bytes(b"not a cache file at all"),
        "empty": lambda file: file.write_bytes(b""),
        "header cut": lambda file: file.write_bytes(file.read_bytes()[:40]),
        "truncated": truncated,
        "buffer outside the file": header_edit(buffer_far),
        "buffer longer than the file": header_edit(buffer_long),
        "null count": header_edit(nulls_wrong),
        "row count": header_edit(rows_wrong),
        "format": header_edit(lambda h: _column(h, "events", "start_ns").update(format="+l")),
        "another dtype": header_edit(lambda h: _column(h, "events", "start_ns").update(format="L")),
        "enum categories": header_edit(lambda h: _column(h, "events", "kind").update(metadata=[["_PL_ENUM_VALUES2", "x;y"]])),
        "column name": header_edit(lambda h: _column(h, "events", "start_ns").update(name="end_ns")),
        "views into no buffer": views_bad,
        "view past its buffer": view_past_end,
        "dictionary index": index_bad,
        "string not UTF-8": not_utf8,
        "inline string not UTF-8": inline_not_utf8,
        "view prefix": prefix_bad,
        "string ends inside a character": split_character,
        "dictionary index one past the end": index_at_the_end,
        "nulls only, but a value": header_edit(nulls_with_values),
        "first column not stored": header_edit(first_not_stored),
        "columns out of order": header_edit(columns_swapped),
        "enum codes as text": header_edit(lambda h: _column(h, "events", "kind").update(format="vu")),
    }


@pytest.fixture(scope="module")
def kineto_tables() -> TraceTables:
    return parse(SAMPLE_TRACES / TRACES[0])


@pytest.mark.parametrize("case", list(_damage_cases()))
def test_a_damaged_cache_file_is_dropped(case: str, reader: str, kineto_tables: TraceTables) -> None:
    path = SAMPLE_TRACES / TRACES[0]
    key = tk_cache.content_key(path)
    assert tk_cache.store(key, kineto_tables)
    file = tk_cache.entry_dir(key) / "tables.tkc"
    _damage_cases()[case](file)
    assert tk_cache.load(key, path) is None
    assert not file.parent.exists()  # dropped: the next read_trace parses and stores again
    # (tests/test_cli_and_cache.py::test_damaged_cache_entry_is_rebuilt reads it through)


def test_the_layout_version_is_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry of another layout (the Parquet folders before this one) is never read."""
    path = SAMPLE_TRACES / TRACES[0]
    key = tk_cache.content_key(path)
    monkeypatch.setattr(tk_cache, "CACHE_FORMAT", tk_cache.CACHE_FORMAT + 1)
    assert tk_cache.content_key(path) != key


def test_random_damage_never_crashes(reader: str) -> None:
    """Bytes changed at random (mostly in the buffers, some in the header): each file is
    either refused or read into tables that polars can use whole (numbers may differ, as in
    any uncompressed format), never a crash or a panic."""
    path = SAMPLE_TRACES / TRACES[1]
    tables = parse(path)
    file = _cache_file("fuzz.tkc", tables)
    raw = file.read_bytes()
    _, start = _header(file)
    rng = random.Random(17)
    outcomes = {"refused": 0, "read": 0}
    for _ in range(40):
        data = bytearray(raw)
        for _ in range(rng.choice([1, 2, 8])):
            data[rng.randrange(start, len(data)) if rng.random() < 0.7 else rng.randrange(16, start)] = rng.randrange(256)
        file.write_bytes(bytes(data))
        try:
            _, frames = tk_cache._read_tables(file)
        except Exception:
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


def test_columns_of_nulls_are_not_stored(reader: str, kineto_tables: TraceTables) -> None:
    """A column that holds only nulls has no buffers in the file (an Enum keeps its small
    dictionary); both readers give it back with its dtype, and polars can compute on it and
    copy it (the native reader backs it with a read-only zero mapping: nothing may write it)."""
    tables = _null_kinds(kineto_tables)
    file = _cache_file("nulls.tkc", tables)
    header, _ = _header(file)
    stored = {c["name"]: c["buffers"] is not None for c in header["tables"][0]["columns"]}
    nulls = [c for c in tables.events.columns if tables.events.get_column(c).null_count() == tables.events.height]
    assert nulls
    assert "memcpy_kind" in nulls
    assert stored == {c: c not in nulls for c in tables.events.columns}
    assert _column(header, "events", "memcpy_kind")["dictionary"]["buffers"] is not None
    # an empty table stores every column (no buffer holds anything)
    assert all(c["buffers"] is not None for t in header["tables"] if not t["rows"] for c in t["columns"])
    _, frames = tk_cache._read_tables(file)
    back = dataclasses.replace(tables, **frames)
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
    # an Enum of nulls whose header claims a value, or another length, is refused
    for change in ({"null_count": events.height - 1}, {"length": events.height + 1, "null_count": events.height + 1}):
        _rewrite_header(file, lambda h, change=change: _column(h, "events", "memcpy_kind").update(change))
        with pytest.raises((tk_cache._Damaged, ValueError)):
            tk_cache._read_tables(file)
        tk_cache._write_tables(file, tables)


@pytest.mark.skipif(not NATIVE, reason="tracekit.native._colmap not built")
@pytest.mark.parametrize("row", [0, 5, 7, 8, 9, 15, 16, -9, -8, -2, -1])
def test_every_dictionary_code_is_checked(row: int, kineto_tables: TraceTables) -> None:
    """The one-byte codes are checked eight at a time, then the rest one by one: a code
    past the dictionary is refused wherever it sits; the largest valid code is read."""
    file = _cache_file("codes.tkc", kineto_tables)
    header, start = _header(file)
    col = _column(header, "events", "kind")
    n = col["dictionary"]["length"]
    at = start + col["buffers"][1][0] + (row % col["length"])
    for code, good in [(n - 1, True), (n, False), (127, False), (128, False), (255, False)]:
        _poke(file, at, bytes([code]))
        frames = _read_or_refused(file)
        assert (frames is not None) == good, code
        if frames is not None:
            assert frames["events"]["kind"][row] == kineto_tables.events.schema["kind"].categories[n - 1]  # type: ignore[attr-defined]


@pytest.mark.skipif(not NATIVE, reason="tracekit.native._colmap not built")
def test_inline_strings_are_read_as_utf8(kineto_tables: TraceTables) -> None:
    """A short (inline) string: ASCII, multi-byte UTF-8 and bytes past its length (which
    polars never reads) are taken; a byte that is not UTF-8 is refused."""
    file = _cache_file("inline.tkc", kineto_tables)
    header, start = _header(file)
    view = start + _column(header, "events", "name")["buffers"][1][0]
    for text, padding, good in [
        (b"abc", b"", True), ("héllo".encode(), b"", True), (b"ab", b"\xff\xfe", True),
        (b"twelve bytes", b"", True), (b"a\xffb", b"", False), (b"ab\xc3", b"", False),
    ]:  # fmt: skip
        _poke(file, view, len(text).to_bytes(4, "little") + (text + padding).ljust(12, b"\0"))
        frames = _read_or_refused(file)
        assert (frames is not None) == good, text
        if frames is not None:
            assert frames["events"]["name"][0] == text.decode()


def test_any_other_format_is_refused_or_reads_back_as_the_schema(reader: str, kineto_tables: TraceTables) -> None:
    """The dtypes are matched from the header (polars' schema is not read back): a column
    described with any other Arrow format is refused, never read as another dtype."""
    file = _cache_file("formats.tkc", kineto_tables)
    raw = file.read_bytes()
    columns = {"event_id": "l", "rank": "i", "name": "vu", "kind": "C", "tid": "l"}
    for name, own in columns.items():
        for fmt in ["c", "C", "s", "S", "i", "I", "l", "L", "f", "g", "b", "vu", "vz", "u", "U", "n"]:
            file.write_bytes(raw)
            _rewrite_header(file, lambda h, name=name, fmt=fmt: _column(h, "events", name).update(format=fmt))
            try:
                _, frames = tk_cache._read_tables(file)
            except Exception:
                assert fmt != own, (name, fmt)
                continue
            assert frames["events"].schema == TABLES[0].polars_schema, (name, fmt)
