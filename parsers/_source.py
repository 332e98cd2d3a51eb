"""Opening input files: plain or gzip, sniffing what they are, bounded decompression.

This module knows bytes, not trace formats.  :func:`open_stream` returns a binary stream
of the decompressed content; :func:`sniff` reads the first bytes to tell formats apart.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tracekit.errors import TraceCorruptError, TraceNotFoundError, TraceTooLargeError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Default cap on decompressed bytes (a gzip bomb guard); TRACEKIT_MAX_BYTES overrides it.
DEFAULT_MAX_BYTES = 64 * 1024**3


def max_decompressed_bytes() -> int:
    value = os.environ.get("TRACEKIT_MAX_BYTES")
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            pass
    return DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class Sniff:
    """What the first bytes of a file say."""

    path: Path
    size: int
    gzip: bool
    head: bytes  # first decompressed bytes (up to 64 KiB)

    @property
    def first_char(self) -> bytes:
        stripped = self.head.lstrip(b"\xef\xbb\xbf \t\r\n")
        return stripped[:1]

    @property
    def is_sqlite(self) -> bool:
        return self.head.startswith(SQLITE_MAGIC)

    @property
    def is_json(self) -> bool:
        return self.first_char in (b"{", b"[")


def check_path(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise TraceNotFoundError("no such file", path=p)
    if p.is_dir():
        raise TraceNotFoundError("is a folder, not a trace file", path=p)
    if not os.access(p, os.R_OK):
        raise TraceNotFoundError("file is not readable (permission denied)", path=p)
    return p


def sniff(path: str | Path) -> Sniff:
    """Read the first bytes of ``path`` (decompressing gzip) without reading the rest."""
    p = check_path(path)
    size = p.stat().st_size
    with open(p, "rb") as fh:
        magic = fh.read(2)
    is_gz = magic == GZIP_MAGIC
    head = b""
    try:
        with open_stream(p) as stream:
            head = stream.read(64 * 1024)
    except (EOFError, OSError, zlib.error) as exc:
        if not is_gz:
            raise TraceNotFoundError(f"cannot read file: {exc}", path=p) from exc
        # a gzip member too short to produce 64 KiB: read what we can
        head = _read_partial_gzip(p, 64 * 1024)
        if not head:
            raise TraceCorruptError(f"gzip data is corrupt ({exc})", path=p) from exc
    return Sniff(path=p, size=size, gzip=is_gz, head=head)


def _read_partial_gzip(path: Path, limit: int) -> bytes:
    out = bytearray()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb") as fh:
        while len(out) < limit:
            block = fh.read(65536)
            if not block:
                break
            try:
                out += d.decompress(block, limit - len(out))
            except zlib.error:
                break
    return bytes(out)


class _BoundedReader(io.RawIOBase):
    """Wraps a decompressing stream and refuses to yield more than ``limit`` bytes."""

    def __init__(self, inner: BinaryIO, limit: int, path: Path):
        self._inner = inner
        self._limit = limit
        self._count = 0
        self._path = path

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._inner.read(len(b))
        n = len(data)
        self._count += n
        if self._count > self._limit:
            raise TraceTooLargeError(
                f"decompressed size exceeds the limit of {self._limit:,} bytes (possible gzip bomb)",
                path=self._path,
                hint="raise the limit with TRACEKIT_MAX_BYTES=<bytes> if the file is genuine",
            )
        b[:n] = data
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def open_stream(path: str | Path) -> BinaryIO:
    """Open ``path`` for reading decompressed bytes (gzip detected by magic, not by name)."""
    p = Path(path)
    fh = open(p, "rb")
    magic = fh.read(2)
    fh.seek(0)
    if magic == GZIP_MAGIC:
        gz = gzip.GzipFile(fileobj=fh, mode="rb")
        return io.BufferedReader(_BoundedReader(gz, max_decompressed_bytes(), p), buffer_size=1 << 20)  # type: ignore[return-value]
    return fh
