"""The content-keyed cache of parsed traces.

A parsed trace is stored in a folder named after a hash of the file's *content* (plus the
schema, tracekit and cache-layout versions), so a changed file can never be served from a
stale entry, and a copied or renamed file is still a hit.  Entries are written to a
temporary folder and renamed into place, so a crash or a concurrent run never leaves a
half-written entry; the cache can be deleted at any time and is rebuilt on demand.

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

An entry holds one uncompressed Arrow IPC file per canonical table (``events.arrow``, ...,
each one record batch of polars' own Arrow export: string views, and Enums as dictionaries
with polars' field metadata) and the marker ``complete``.  The IPC format needs one schema
per file, and the seven tables have seven, hence seven files; the events file also carries
the trace's :class:`TraceInfo` in its schema metadata.  Reading maps each file with pyarrow
and hands its buffers to polars through the Arrow C Data Interface without decoding or
copying them, so a page of a column is read from the page cache only when an analysis first
touches it.  Entries are never rewritten in place (a new entry is a new folder renamed into
place, and clearing the cache unlinks files), so a mapped file does not change under its
reader.

Nothing in a file is trusted before it is checked, so a damaged, truncated, foreign or
hostile file is dropped and parsed again, never a crash and never wrong tables: pyarrow's
reader checks the file's structure (magic, footer, flatbuffers, every buffer inside the
file); the schema must carry this entry's stamp (layout, versions, content key and table
name) and list the table's schema columns in order, each with the Arrow type polars gives
its dtype (an Enum: integer codes into a string dictionary, its categories in the field
metadata exactly as polars writes them, since polars parses them); and the batch is
validated in full (``validate(full=True)``: lengths, null counts, string views inside their
buffers, UTF-8, dictionary codes in range), because polars trusts what it imports.

Two things make a file smaller at no cost to the reader: a column that holds only nulls
(but a table's first, whose buffers bound its rows) is written as Arrow's null type, with no
buffers, and cast back to its dtype on reading; a string column stores each distinct string
once (a column built row by row holds a copy of a long string per row).

Location: ``$TRACEKIT_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/tracekit``, else
``~/.cache/tracekit``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from .._version import __version__
from ..native import ArrowCapsules
from ..progress import Progress
from ..schema import SCHEMA_VERSION, TABLES, TableSchema, TraceInfo, TraceTables

if TYPE_CHECKING:
    import pyarrow as pa

_MARKER = "complete"
#: the layout of an entry; part of every key, so an entry of another layout is never read
CACHE_FORMAT = 4
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


#: the schema metadata keys of an entry's files: every file's stamp, and the events file's
#: TraceInfo (JSON); and the field metadata in which polars keeps an Enum's categories
_STAMP = b"tracekit.cache"
_INFO = b"tracekit.info"
_ENUM_VALUES = b"_PL_ENUM_VALUES2"


class _Damaged(Exception):
    """A cache file that cannot be read back (the entry is dropped and rebuilt)."""


def table_file(entry: Path, name: str) -> Path:
    """The Arrow IPC file that holds table ``name`` in the entry folder ``entry``."""
    return entry / f"{name}.arrow"


def _stamp(key: str, table: str) -> bytes:
    """What each file of an entry says about itself: the layout and versions, its entry's
    content key and its table, so a file of another entry, another table or another
    tracekit is refused even where its bytes are a valid Arrow file."""
    mark = {"cache": CACHE_FORMAT, "schema": SCHEMA_VERSION, "tracekit": __version__, "key": key, "table": table}
    return json.dumps(mark, sort_keys=True).encode("utf-8")


def _write_tables(entry: Path, tables: TraceTables, key: str) -> None:
    """Write every table of ``tables`` into the folder ``entry`` as ``<table>.arrow`` (one
    uncompressed record batch); the events file also holds the trace's info."""
    import pyarrow as pa  # only when storing: a parse costs far more than this import

    for schema in TABLES:
        metadata = {_STAMP: _stamp(key, schema.name)}
        if schema.name == "events":
            metadata[_INFO] = tables.info.to_json().encode("utf-8")
        batch = _record_batch(schema.conform(tables.table(schema.name)), metadata)
        with pa.OSFile(str(table_file(entry, schema.name)), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)


def _record_batch(frame: pl.DataFrame, metadata: dict[bytes, bytes]) -> pa.RecordBatch:
    """``frame`` as one record batch of polars' Arrow export, a column of nulls only (but the
    first) as Arrow's null type and each string column with its distinct strings once."""
    import pyarrow as pa

    arrow = frame.rechunk().to_arrow(compat_level=pl.CompatLevel.newest())
    arrays = []
    fields = []
    for i, (field, column) in enumerate(zip(arrow.schema, arrow.columns, strict=True)):
        array = column.combine_chunks()
        if i and len(array) and array.null_count == len(array):
            array, field = pa.nulls(len(array)), pa.field(field.name, pa.null())
        elif array.type == pa.string_view():
            array = _distinct_once(array)
        arrays.append(array)
        fields.append(field)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=metadata))


def _distinct_once(array: pa.Array) -> pa.Array:
    """A string-view column whose distinct strings are stored once, in one buffer, each row's
    view pointing into it; the column as it is when that would not make it smaller."""
    import pyarrow as pa

    stored = sum(b.size for b in array.buffers()[2:] if b is not None)  # long strings' bytes
    if not stored:
        return array
    values = pl.Series("v", array)
    distinct = values.unique(maintain_order=True).drop_nulls()
    if stored <= distinct.str.len_bytes().sum():
        return array
    # a contiguous copy of the distinct strings (Arrow's cast to views keeps that buffer), then
    # each row's view into it; polars' gather copies views and shares their buffers
    packed = distinct.to_arrow(compat_level=pl.CompatLevel.newest()).cast(pa.large_string()).cast(pa.string_view())
    codes = values.to_frame().join(distinct.to_frame().with_row_index("code"), on="v", how="left", maintain_order="left")
    return pl.Series("v", packed).gather(codes.get_column("code")).to_arrow(compat_level=pl.CompatLevel.newest())


@functools.cache
def _arrow_types() -> dict[type[pl.DataType], pa.DataType]:
    """The Arrow type polars exports for each dtype of the canonical tables but Enum."""
    import pyarrow as pa

    return {
        pl.Int8: pa.int8(), pl.UInt8: pa.uint8(), pl.Int16: pa.int16(), pl.UInt16: pa.uint16(),
        pl.Int32: pa.int32(), pl.UInt32: pa.uint32(), pl.Int64: pa.int64(), pl.UInt64: pa.uint64(),
        pl.Float32: pa.float32(), pl.Float64: pa.float64(), pl.Boolean: pa.bool_(), pl.String: pa.string_view(),
    }  # fmt: skip


def _enum_values(dtype: pl.Enum) -> bytes:
    """An Enum's categories as polars writes them into the field metadata (``length;text``
    each, the length in bytes); polars reads them back to rebuild the Enum."""
    return b"".join(b"%d;%s" % (len(c), c) for c in (v.encode("utf-8") for v in dtype.categories.to_list()))


def _stored_as(field: pa.Field, dtype: pl.DataType) -> bool | None:
    """Whether ``field`` is how polars exports a column of ``dtype``; None when the dtype has
    no known Arrow type (the caller then compares the imported column's dtype)."""
    import pyarrow as pa

    typ = field.type
    if isinstance(dtype, pl.Enum):
        return (
            pa.types.is_dictionary(typ)
            and typ.index_type in (pa.uint8(), pa.uint16(), pa.uint32())
            and typ.value_type == pa.string_view()
            and field.metadata == {_ENUM_VALUES: _enum_values(dtype)}
        )
    expected = _arrow_types().get(type(dtype))
    if expected is None:
        return None
    return typ == expected and not field.metadata


def _check_schema(schema: TableSchema, arrow: pa.Schema) -> tuple[list[int], list[int]]:
    """Check that a file's schema is ``schema``'s columns in order, each as polars exports its
    dtype or as Arrow's null type (not the first: its buffers bound the rows).  Returns the
    positions of the null-typed columns, and of those whose dtype has no known Arrow type."""
    import pyarrow as pa

    if arrow.names != schema.names:
        raise _Damaged(f"table {schema.name}: not its schema's columns")
    nulls: list[int] = []
    unknown: list[int] = []
    for i, (field, column) in enumerate(zip(arrow, schema.columns, strict=True)):
        if pa.types.is_null(field.type) and i and not field.metadata:
            nulls.append(i)
            continue
        stored = _stored_as(field, column.dtype)
        if stored is None:
            unknown.append(i)
        elif not stored:
            raise _Damaged(f"table {schema.name}: column {column.name} is not stored as {column.dtype} ({field})")
    return nulls, unknown


def _read_table(path: Path, schema: TableSchema, key: str) -> tuple[pl.DataFrame, dict[bytes, bytes]]:
    """One table of an entry, mapped, checked and imported by polars without a copy, and
    its file's schema metadata."""
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:  # the buffers keep the mapping; the file is closed
        reader = pa.ipc.open_file(source)
        arrow = reader.schema
        metadata = arrow.metadata or {}
        if metadata.get(_STAMP) != _stamp(key, schema.name):
            raise _Damaged(f"{path.name}: not this entry's {schema.name} table")
        nulls, unknown = _check_schema(schema, arrow)
        if reader.num_record_batches != 1:
            raise _Damaged(f"{path.name}: {reader.num_record_batches} record batches")
        batch = reader.get_batch(0)
    batch.validate(full=True)
    # polars gets the columns without the file's own metadata, which it would decode unchecked
    # (the trace info is read by the caller)
    frame = pl.DataFrame(ArrowCapsules(batch.replace_schema_metadata(None).__arrow_c_array__()))
    for i in nulls:  # in place: a query (``with_columns``) would cost 10x more than the casts
        frame.replace_column(i, frame.to_series(i).cast(schema.columns[i].dtype))
    for i in unknown:
        if frame.dtypes[i] != schema.columns[i].dtype:
            raise _Damaged(f"table {schema.name}: column {schema.columns[i].name} reads back as {frame.dtypes[i]}")
    return frame, metadata


def _read_tables(entry: Path, key: str) -> tuple[TraceInfo, dict[str, pl.DataFrame]]:
    frames: dict[str, pl.DataFrame] = {}
    info: TraceInfo | None = None
    for schema in TABLES:
        frames[schema.name], metadata = _read_table(table_file(entry, schema.name), schema, key)
        if schema.name == "events":
            if _INFO not in metadata:
                raise _Damaged("the events file holds no trace info")
            info = TraceInfo.from_json(metadata[_INFO].decode("utf-8"))
    if not isinstance(info, TraceInfo):
        raise _Damaged("no trace info")
    return info, frames


def load(key: str, path: str | Path, root: Path | None = None) -> TraceTables | None:
    """The cached tables for ``key``, or None (a damaged entry is removed and ignored)."""
    entry = entry_dir(key, root)
    if not (entry / _MARKER).exists():
        return None
    try:
        info, frames = _read_tables(entry, key)
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

    import pyarrow as pa  # the writer's errors (a parse costs far more than this import)

    def write(tmp: Path) -> None:
        _write_tables(tmp, tables, key)
        (tmp / _MARKER).write_text(__version__ + "\n", encoding="utf-8")

    return write_entry(entry, write, (OSError, pa.ArrowException))


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
