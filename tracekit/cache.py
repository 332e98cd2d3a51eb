"""The content-keyed Parquet cache of parsed traces.

A parsed trace is stored as the Parquet files of :meth:`TraceTables.write_parquet` in a
folder named after a hash of the file's *content* (plus the schema and tracekit
versions), so a changed file can never be served from a stale entry, and a copied or
renamed file is still a hit.  Entries are written to a temporary folder and renamed into
place, so a crash or a concurrent run never leaves a half-written entry; the cache can
be deleted at any time and is rebuilt on demand.

Location: ``$TRACEKIT_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/tracekit``, else
``~/.cache/tracekit``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ._version import __version__
from .progress import Progress
from .schema import SCHEMA_VERSION, TraceTables

_MARKER = "complete"


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


def load(key: str, path: str | Path, root: Path | None = None) -> TraceTables | None:
    """The cached tables for ``key``, or None (a damaged entry is removed and ignored)."""
    entry = entry_dir(key, root)
    if not (entry / _MARKER).exists():
        return None
    try:
        tables = TraceTables.read_parquet(entry)
    except Exception:
        shutil.rmtree(entry, ignore_errors=True)
        return None
    return TraceTables(
        info=tables.info.with_changes(path=str(path)),
        events=tables.events,
        links=tables.links,
        flows=tables.flows,
        devices=tables.devices,
        threads=tables.threads,
        counters=tables.counters,
        memory=tables.memory,
    )


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
        tables.write_parquet(tmp)
        (tmp / _MARKER).write_text(__version__ + "\n", encoding="utf-8")

    return write_entry(entry, write)


def clear(root: Path | None = None) -> int:
    """Delete every cached trace; returns the number of entries removed."""
    base = (root or cache_dir()) / "traces"
    if not base.exists():
        return 0
    count = sum(1 for _ in base.glob("*/*"))
    shutil.rmtree(base, ignore_errors=True)
    return count
