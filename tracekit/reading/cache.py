"""The content-keyed cache of parsed traces.

A parsed trace is stored as one file, ``tables.tkc``, in a folder named after a hash of the
file's *content* (plus the schema, tracekit and cache-layout versions), so a changed file
can never be served from a stale entry, and a copied or renamed file is still a hit.
Entries are written to a temporary folder and renamed into place, so a crash or a
concurrent run never leaves a half-written entry; the cache can be deleted at any time and
is rebuilt on demand.

Hashing a large file costs about a second per GB, so a second open of the same file at the
same path does not hash it again: ``stat/`` remembers, for each path, the file's identity
when it was last hashed (device, inode, size, modification and status-change times, to the
nanosecond) and the content key it had.  An open whose file still has exactly that identity
takes the key without reading the file (like make, or ccache's direct mode); any other open
hashes the content.  Editing a file changes its status-change time (``ctime``), which no
program can set back (``touch -d`` and ``os.utime`` restore the modification time only), so
an edited file is always hashed again, even one rewritten to the same size and given its old
modification time.  An identity is only remembered for a file whose last change is more than
:data:`SETTLE_NS` old when it is hashed, and only when the file did not change while it was
being hashed, so a change in the same clock tick as the remembered one cannot go unseen.

The file holds every table's columns as uncompressed Arrow buffers (64-byte aligned) behind
a JSON header that gives each column's Arrow format, length, null count and buffer
offsets, and the trace's :class:`TraceInfo`.  Reading maps the file and hands the buffers
to polars through the Arrow C Data Interface without decoding or copying them
(``tracekit.native._colmap``, a small C extension): a second open costs a few milliseconds (3-4 ms
for the 26-87 MB shared traces in a fresh process; more for a 300 MB trace: the checks
below read bitmaps, string views and codes), and a page of a column is read from the page
cache only when an analysis first touches it.
Entries are never rewritten in place (a new entry is a new file renamed into place, and
clearing the cache unlinks files), so a mapped file does not change under its reader.  Every buffer is checked first (it lies inside the file and
is long enough for its column, validity bitmaps count the stated nulls, string views stay
inside their data, strings are UTF-8, dictionary codes are in range), so a damaged or
hostile file is dropped and parsed again, never trusted.  The header must list each
table's schema columns in order, each with the Arrow format the writer gives its dtype, so
the tables read back with the schema's dtypes.  Without the extension (no compiler, or
``TRACEKIT_PURE_PYTHON=1``) pyarrow reads the same file, fully validated, into the same
tables.  A column that holds only nulls (but a table's first, whose buffers bound the
rows) stores no buffers: the native reader points it at one read-only anonymous mapping
that is never written (it costs no memory), and an Enum of nulls comes back as a constant
column.  The native writer stores each distinct long string once.
The files are larger than Parquet (0.4-0.5x the trace's JSON; the uncompressed Parquet
entries were about 0.12x), the price of reading without decoding.

Location: ``$TRACEKIT_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/tracekit``, else
``~/.cache/tracekit``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl

from .._version import __version__
from ..native import ArrowCapsules
from ..native import load as load_native
from ..progress import Progress
from ..schema import SCHEMA_VERSION, TABLES, TableSchema, TraceInfo, TraceTables

_MARKER = "complete"
#: the layout of an entry; part of every key, so an entry of another layout is never read
CACHE_FORMAT = 3
#: a file's identity is remembered only when its last change is older than this (ns)
SETTLE_NS = 2_000_000_000
#: the stat fields that make up a file's identity
_IDENTITY = ("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")


def cache_dir() -> Path:
    """The cache root (not created)."""
    explicit = os.environ.get("TRACEKIT_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "tracekit"


def file_digest(path: str | Path, prefix: bytes = b"", *, progress: Progress | None = None) -> str:
    """BLAKE2b-160 (hex) of ``prefix`` followed by the file's bytes, read in 4 MiB blocks.

    ``progress`` hears each block read (its ``advance``); the caller names the phase.
    """
    h = hashlib.blake2b(prefix, digest_size=20)
    with open(path, "rb") as fh:
        while block := fh.read(4 * 1024 * 1024):
            h.update(block)
            if progress is not None:
                progress.advance(len(block))
    return h.hexdigest()


def content_key(path: str | Path, *, progress: Progress | None = None) -> str:
    """A hash of the file's bytes, the schema version and the tracekit version."""
    return file_digest(path, f"tracekit {__version__} schema {SCHEMA_VERSION} cache {CACHE_FORMAT}\n".encode(), progress=progress)


def entry_dir(key: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "traces" / key[:2] / key


def _identity(st: os.stat_result) -> list[int]:
    return [int(getattr(st, name)) for name in _IDENTITY]


def _stat_file(path: str | Path, root: Path | None) -> tuple[str, Path]:
    """(the file's absolute path, the stat record that remembers it)."""
    where = os.path.abspath(path)
    # versions in the name: another tracekit (another key for the same bytes) never reads
    # this record, and never overwrites it
    named = f"tracekit {__version__} schema {SCHEMA_VERSION} cache {CACHE_FORMAT}\n{where}"
    name = hashlib.blake2b(named.encode("utf-8", "surrogateescape"), digest_size=20).hexdigest()
    return where, (root or cache_dir()) / "stat" / name[:2] / name


def known_key(path: str | Path, st: os.stat_result, root: Path | None = None) -> str | None:
    """The content key remembered for ``path`` when the file (whose ``os.stat`` is ``st``)
    still has the identity it had when it was hashed; None otherwise (hash it)."""
    where, record = _stat_file(path, root)
    try:
        data = json.loads(record.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("path") != where or data.get("identity") != _identity(st):
        return None
    key = data.get("key")
    return key if isinstance(key, str) and len(key) == 40 and all(c in "0123456789abcdef" for c in key) else None


def remember(path: str | Path, before: os.stat_result, key: str, root: Path | None = None) -> bool:
    """Remember that ``path``, whose ``os.stat`` was ``before`` when hashing started, has
    content key ``key``: only when the file has not changed since and its last change is
    at least :data:`SETTLE_NS` old (see the module's notes).  True when remembered."""
    try:
        after = os.stat(path)
    except OSError:
        return False
    if _identity(after) != _identity(before):
        return False  # changed while it was hashed
    if time.time_ns() - max(after.st_mtime_ns, after.st_ctime_ns) < SETTLE_NS:
        return False  # changed too recently: a change in the same clock tick would look the same
    where, record = _stat_file(path, root)
    text = json.dumps({"path": where, "identity": _identity(after), "key": key})
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=record.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, record)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return False
    except OSError:
        return False
    return True


#: the one file of an entry: every table's Arrow buffers behind a JSON header
_TABLES_FILE = "tables.tkc"
_MAGIC = b"TKCOLS1\n"
_ALIGN = 64
_MAX_HEADER = 64 * 1024 * 1024


class _Damaged(Exception):
    """A cache file that cannot be read back (the entry is dropped and rebuilt), or tables
    that cannot be written as one (the trace is then not cached)."""


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _native() -> ModuleType | None:
    """The memory-mapping reader (tracekit/native/_colmap.c), or None: not built, or
    ``TRACEKIT_PURE_PYTHON`` asks for the pyarrow path (same tables)."""
    return load_native("colmap")


# Arrow C Data Interface format strings of the column types the canonical tables use
_FORMATS = {
    "int8": "c", "uint8": "C", "int16": "s", "uint16": "S", "int32": "i", "uint32": "I",
    "int64": "l", "uint64": "L", "float": "f", "double": "g", "bool": "b", "string_view": "vu", "string": "u", "large_string": "U",
}  # fmt: skip


def _write_tables(path: Path, tables: TraceTables) -> None:
    """Write every table of ``tables`` (and its info) as one cache file: a JSON header naming
    each column's Arrow format, length, null count and buffers, then the buffers, aligned.
    The buffers of a column that holds only nulls (but the first) are not stored: its
    ``buffers`` are null and the reader backs it with zeros (an Enum's dictionary is stored)."""
    import pyarrow as pa  # only when storing: a parse costs far more than this import

    buffers: list[Any] = []
    at = 0

    native = _native()

    def place(buf: Any) -> list[int] | None:
        nonlocal at
        if buf is None:
            return None
        size = memoryview(buf).nbytes
        spot = [at, size]
        buffers.append((at, buf))
        at = _align(at + size)
        return spot

    def column(name: str, arr: Any, field: Any, stored: bool = True) -> dict[str, Any]:
        if arr.offset != 0:
            raise _Damaged(f"column {name} is a slice")
        typ = arr.type
        meta = [[k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape")] for k, v in (field.metadata or {}).items()] if field is not None else []
        flags = (2 if field is None or field.nullable else 0)
        dictionary = None
        if pa.types.is_dictionary(typ):
            fmt = _FORMATS.get(str(typ.index_type))
            flags |= 1 if typ.ordered else 0
            dictionary = column("", arr.dictionary, None)
            bufs = arr.buffers()[:2]
        else:
            fmt = _FORMATS.get(str(typ))
            bufs = arr.buffers()
            if fmt == "vu" and native is not None and len(bufs) > 2 and stored:
                # each distinct long string once (a parsed column holds a copy per row):
                # a smaller file, and fewer bytes for the reader to check
                views, data = native.compact_views(memoryview(bufs[1])[: 16 * len(arr)], bufs[2:])
                bufs = [bufs[0], views, *data]
        if fmt is None:
            raise _Damaged(f"column {name}: no cache layout for Arrow type {typ}")
        return {
            "name": name, "format": fmt, "metadata": meta, "flags": flags, "length": len(arr),
            # a missing value buffer (an empty array may have none) is stored as an empty one;
            # a column of nulls only stores none (null: the reader backs it with zeros)
            "null_count": arr.null_count,
            "buffers": [place(b if b is not None or i == 0 else b"") for i, b in enumerate(bufs)] if stored else None,
            "dictionary": dictionary,
        }  # fmt: skip

    described = []
    for schema in TABLES:
        frame = schema.conform(tables.table(schema.name))
        arrow = frame.rechunk().to_arrow(compat_level=pl.CompatLevel.newest())
        cols = []
        for i, name in enumerate(arrow.column_names):
            chunks = arrow.column(i).chunks
            arr = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
            # the first column is always stored: its buffers bound the table's rows by the file's size
            stored = i == 0 or arr.null_count < len(arr) or len(arr) == 0
            cols.append(column(name, arr, arrow.schema.field(i), stored))
        described.append({"name": schema.name, "rows": frame.height, "columns": cols})
    header = json.dumps({"byteorder": sys.byteorder, "info": tables.info.to_json(), "tables": described}).encode("utf-8")
    start = _align(16 + len(header))
    with open(path, "wb") as fh:
        fh.write(_MAGIC + len(header).to_bytes(8, "little") + header)
        fh.write(b"\0" * (start - 16 - len(header)))
        written = 0
        for offset, buf in buffers:
            fh.write(b"\0" * (offset - written))
            fh.write(buf)
            written = offset + memoryview(buf).nbytes
        fh.write(b"\0" * (_align(written) - written))


def _read_header(path: Path) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as fh:
        head = fh.read(16)
        if len(head) != 16 or head[:8] != _MAGIC:
            raise _Damaged("not a tracekit cache file")
        size = int.from_bytes(head[8:], "little")
        if size > _MAX_HEADER:
            raise _Damaged("header too large")
        raw = fh.read(size)
    if len(raw) != size:
        raise _Damaged("header cut short")
    header = json.loads(raw)
    if not isinstance(header, dict) or not isinstance(header.get("tables"), list):
        raise _Damaged("header without tables")
    if header.get("byteorder") != sys.byteorder:
        raise _Damaged("written on a machine of the other byte order")
    return header, _align(16 + size)


def _arrow_array(col: dict[str, Any], whole: Any, start: int) -> Any:
    """The pure-Python reader's column: a pyarrow array over the mapped file, fully validated."""
    import pyarrow as pa

    types = {
        "c": pa.int8(), "C": pa.uint8(), "s": pa.int16(), "S": pa.uint16(), "i": pa.int32(), "I": pa.uint32(),
        "l": pa.int64(), "L": pa.uint64(), "f": pa.float32(), "g": pa.float64(), "b": pa.bool_(),
        "vu": pa.string_view(), "u": pa.string(), "U": pa.large_string(),
    }  # fmt: skip
    typ = types.get(str(col["format"]))
    if typ is None:
        raise _Damaged(f"unknown column format {col['format']!r}")
    if col["buffers"] is None:  # nulls only, nothing stored
        if int(col["null_count"]) != int(col["length"]):
            raise _Damaged("a column without buffers must hold only nulls")
        if col["dictionary"] is None:
            return pa.nulls(int(col["length"]), typ)
        values = _arrow_array(col["dictionary"], whole, start)
        if col["length"] and not len(values):
            raise _Damaged("dictionary index out of range")
        return pa.DictionaryArray.from_arrays(pa.nulls(int(col["length"]), typ), values, ordered=bool(int(col["flags"]) & 1))
    bufs = [None if b is None else whole.slice(start + int(b[0]), int(b[1])) for b in col["buffers"]]
    if any(b is not None and int(v[0]) + start + int(v[1]) > whole.size for b, v in zip(bufs, col["buffers"], strict=True)):
        raise _Damaged("a buffer lies outside the file")
    arr = pa.Array.from_buffers(typ, int(col["length"]), bufs, null_count=int(col["null_count"]))
    arr.validate(full=True)
    if col["dictionary"] is not None:
        arr = pa.DictionaryArray.from_arrays(arr, _arrow_array(col["dictionary"], whole, start), ordered=bool(int(col["flags"]) & 1))
        arr.validate(full=True)
    return arr


def _null_enum(col: dict[str, Any]) -> bool:
    """A header's column is an Enum of nulls only (no buffers; a dictionary)."""
    return col["buffers"] is None and col["dictionary"] is not None


def _read_tables(path: Path) -> tuple[TraceInfo, dict[str, pl.DataFrame]]:
    header, start = _read_header(path)
    info = TraceInfo.from_json(header["info"])
    described = {t["name"]: t for t in header["tables"]}
    if set(described) != {s.name for s in TABLES}:
        raise _Damaged("the tables are not the canonical ones")
    # the tables whose every column's Arrow type was matched to its dtype from the header
    typed = {schema.name for schema in TABLES if _check_columns(schema, described[schema.name].get("columns"))}
    native = _native()
    frames: dict[str, pl.DataFrame] = {}
    if native is not None:
        # the native reader takes the header's column descriptions as they are; it hands an
        # Enum column of nulls only over as a column of Arrow's null type, cast here (polars
        # converts an imported Enum row by row: 0.3 ms for 140 k nulls)
        specs = [(int(described[s.name]["rows"]), described[s.name]["columns"]) for s in TABLES]
        for schema, pair in zip(TABLES, native.map_tables(str(path), start, specs), strict=True):
            frame = pl.DataFrame(ArrowCapsules(pair))
            for i, c in enumerate(described[schema.name]["columns"]):
                if _null_enum(c):
                    frame.replace_column(i, frame.to_series(i).cast(schema.columns[i].dtype))
            frames[schema.name] = frame
    else:
        import pyarrow as pa

        whole = pa.memory_map(str(path)).read_buffer()
        for schema in TABLES:
            table = described[schema.name]
            cols = table["columns"]
            arrays = [_arrow_array(c, whole, start) for c in cols]
            fields = [
                pa.field(str(c["name"]), a.type, nullable=bool(int(c["flags"]) & 2), metadata=dict(c["metadata"]) or None)
                for c, a in zip(cols, arrays, strict=True)
            ]
            frames[schema.name] = pl.DataFrame(pa.Table.from_arrays(arrays, schema=pa.schema(fields)))
    for schema in TABLES:
        rows = int(described[schema.name]["rows"])
        frame = frames[schema.name]
        if frame.height != rows:
            raise _Damaged(f"table {schema.name}: {frame.height} rows, the header says {rows}")
        if schema.name not in typed and list(frame.schema.items()) != [(c.name, c.dtype) for c in schema.columns]:
            raise _Damaged(f"table {schema.name}: the columns read back as {frame.schema}, not as the schema's")
    return info, frames


def _field_metadata(dtype: pl.DataType) -> list[list[str]]:
    """The Arrow field metadata polars exports for a column of ``dtype``: for an Enum its
    categories (``length;text`` each), which polars reads back to rebuild the Enum."""
    if isinstance(dtype, pl.Enum):
        return [["_PL_ENUM_VALUES2", "".join(f"{len(c)};{c}" for c in dtype.categories.to_list())]]
    return []


#: the Arrow format the writer gives each dtype (polars' own export): a column of one of
#: these dtypes described with that format reads back with that dtype
_DTYPE_FORMATS: dict[type[pl.DataType], str] = {
    pl.Int8: "c", pl.UInt8: "C", pl.Int16: "s", pl.UInt16: "S", pl.Int32: "i", pl.UInt32: "I",
    pl.Int64: "l", pl.UInt64: "L", pl.Float32: "f", pl.Float64: "g", pl.Boolean: "b", pl.String: "vu",
}  # fmt: skip


def _check_columns(schema: TableSchema, cols: Any) -> bool:
    """The header's columns of one table are its schema's columns, in order, described as
    the writer describes each dtype: polars parses some of this (an Enum's categories) and
    must never be handed a damaged description.  True when each column's Arrow type was
    matched to its dtype (an Enum: integer codes, a string dictionary and the Enum's
    categories), so polars reads the table back with the schema's dtypes; False when a dtype
    has no known format (the caller then compares the frame's schema)."""
    if not isinstance(cols, list) or len(cols) != len(schema.columns):
        raise _Damaged(f"table {schema.name}: not its schema's columns")
    if not isinstance(cols[0], dict) or cols[0].get("buffers") is None:  # its buffers bound the rows by the file's size
        raise _Damaged(f"table {schema.name}: the first column is not stored")
    known = True
    for col, want in zip(cols, schema.columns, strict=True):
        if not isinstance(col, dict) or col.get("name") != want.name:
            raise _Damaged(f"table {schema.name}: column {want.name} is not where the schema has it")
        dtype = want.dtype
        if col["flags"] not in (0, 1, 2, 3):
            raise _Damaged(f"table {schema.name}: column {want.name} has unknown flags")
        dictionary = col["dictionary"]
        if isinstance(dtype, pl.Enum):  # integer codes into a dictionary of its categories
            if (
                dictionary is None
                or col["format"] not in ("C", "S", "I")
                or dictionary["format"] != "vu"
                or dictionary["metadata"] != []
                or col["metadata"] != _field_metadata(dtype)
            ):
                raise _Damaged(f"table {schema.name}: column {want.name} is not stored as a {dtype}")
        elif dictionary is not None or col["metadata"] != []:
            raise _Damaged(f"table {schema.name}: column {want.name} is not stored as a {dtype}")
        elif (expected := _DTYPE_FORMATS.get(type(dtype))) is None:
            known = False  # the caller compares the frame's schema
        elif col["format"] != expected:
            raise _Damaged(f"table {schema.name}: column {want.name} is not stored as a {dtype}")
    return known


def load(key: str, path: str | Path, root: Path | None = None) -> TraceTables | None:
    """The cached tables for ``key``, or None (a damaged entry is removed and ignored)."""
    entry = entry_dir(key, root)
    if not (entry / _MARKER).exists():
        return None
    try:
        info, frames = _read_tables(entry / _TABLES_FILE)
    except (Exception, pl.exceptions.PanicException):  # polars' import panics on what it cannot take
        shutil.rmtree(entry, ignore_errors=True)
        return None
    return TraceTables(info=info.with_changes(path=str(path)), **frames)


def write_entry(entry: Path, write: Callable[[Path], None], errors: tuple[type[Exception], ...] = (OSError,)) -> bool:
    """Write the folder ``entry`` atomically: ``write`` fills a temporary folder beside it, which
    is then renamed to ``entry``, so a reader sees a whole entry or none.  True when the entry
    stands (ours, or another process's that was renamed first: theirs is as good as ours);
    False when it cannot be written (``write`` raised one of ``errors``, or the folder is not
    writable), and nothing is left behind."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    except OSError:
        return False
    try:
        write(tmp)
        os.rename(tmp, entry)
        return True
    except errors:
        shutil.rmtree(tmp, ignore_errors=True)
        return entry.is_dir()


def store(key: str, tables: TraceTables, root: Path | None = None) -> bool:
    """Write ``tables`` under ``key`` atomically; returns False if the cache is unusable."""
    entry = entry_dir(key, root)
    if (entry / _MARKER).exists():
        return True

    def write(tmp: Path) -> None:
        _write_tables(tmp / _TABLES_FILE, tables)
        (tmp / _MARKER).write_text(__version__ + "\n", encoding="utf-8")

    return write_entry(entry, write, (OSError, _Damaged))


def clear(root: Path | None = None) -> int:
    """Delete every cached trace, the remembered file identities and the SQLite files
    exported from Nsight reports (``exports/``); returns the number of entries removed."""
    top = root or cache_dir()
    shutil.rmtree(top / "stat", ignore_errors=True)
    shutil.rmtree(top / "exports", ignore_errors=True)
    base = top / "traces"
    if not base.exists():
        return 0
    count = sum(1 for _ in base.glob("*/*"))
    shutil.rmtree(base, ignore_errors=True)
    return count
