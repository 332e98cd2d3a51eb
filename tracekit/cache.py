"""The content-keyed Parquet cache of parsed traces.

A parsed trace is stored as the Parquet files of :meth:`TraceTables.write_parquet` in a
folder named after a hash of the file's *content* (plus the schema and tracekit
versions), so a changed file can never be served from a stale entry, and a copied or
renamed file is still a hit.  Entries are written to a temporary folder and renamed into
place, so a crash or a concurrent run never leaves a half-written entry; the cache can
be deleted at any time and is rebuilt on demand.

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

Entries are written as uncompressed Parquet (dictionary and run-length encoded), which
decodes about twice as fast as zstd at a few times the size (a fraction of the trace's own
size), without the columns that hold only nulls (restored on reading: decoding them cost
as much as a real column, and a fresh process pays a page fault for every 4 KiB it
fills), and the tables of an entry are decoded in two threads.

Location: ``$TRACEKIT_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/tracekit``, else
``~/.cache/tracekit``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from ._version import __version__
from .progress import Progress
from .schema import SCHEMA_VERSION, TABLES, TraceInfo, TraceTables

_MARKER = "complete"
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
    return file_digest(path, f"tracekit {__version__} schema {SCHEMA_VERSION}\n".encode(), progress=progress)


def entry_dir(key: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "traces" / key[:2] / key


def _identity(st: os.stat_result) -> list[int]:
    return [int(getattr(st, name)) for name in _IDENTITY]


def _stat_file(path: str | Path, root: Path | None) -> tuple[str, Path]:
    """(the file's absolute path, the stat record that remembers it)."""
    where = os.path.abspath(path)
    # versions in the name: another tracekit (another key for the same bytes) never reads
    # this record, and never overwrites it
    named = f"tracekit {__version__} schema {SCHEMA_VERSION}\n{where}"
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


def _read_table(entry: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(entry / f"{name}.parquet", parallel="none")


def load(key: str, path: str | Path, root: Path | None = None) -> TraceTables | None:
    """The cached tables for ``key``, or None (a damaged entry is removed and ignored)."""
    entry = entry_dir(key, root)
    if not (entry / _MARKER).exists():
        return None
    try:
        info = TraceInfo.from_json((entry / "info.json").read_text(encoding="utf-8"))
        # the events table is most of the work: it is decoded beside the other six
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="tracekit-cache") as pool:
            futures = {s.name: pool.submit(_read_table, entry, s.name) for s in TABLES}
            frames = {s.name: s.conform(futures[s.name].result()) for s in TABLES}
    except Exception:
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
        tables.write_parquet(tmp, compression="uncompressed", statistics=False, null_columns=False)
        (tmp / _MARKER).write_text(__version__ + "\n", encoding="utf-8")

    return write_entry(entry, write)


def clear(root: Path | None = None) -> int:
    """Delete every cached trace (and the remembered file identities); returns the number
    of entries removed."""
    top = root or cache_dir()
    shutil.rmtree(top / "stat", ignore_errors=True)
    base = top / "traces"
    if not base.exists():
        return 0
    count = sum(1 for _ in base.glob("*/*"))
    shutil.rmtree(base, ignore_errors=True)
    return count
