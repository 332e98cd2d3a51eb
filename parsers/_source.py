"""Opening input files: plain or gzip, sniffing what they are, bounded decompression.

This module knows bytes, not trace formats.  :func:`open_stream` returns a binary stream
of the decompressed content; :func:`sniff` reads the first bytes to tell formats apart.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, Generic, Protocol, TypeVar

from tracekit.errors import TraceCorruptError, TraceNotFoundError, TraceTooLargeError

_inflate: ModuleType
try:  # ISA-L's inflate: the same interface as zlib's, about twice its speed on traces
    from isal import isal_zlib as _inflate
except ImportError:  # a platform without the wheel: zlib, the same bytes more slowly
    _inflate = zlib

#: what a damaged deflate stream raises, from either library
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate.error)
GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Default cap on decompressed bytes (a gzip bomb guard); TRACEKIT_MAX_BYTES overrides it.
DEFAULT_MAX_BYTES = 64 * 1024**3

T = TypeVar("T")


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


class ProgressSink(Protocol):
    """What the readers report progress to (:class:`tracekit.progress.Progress` is one)."""

    def phase(self, name: str, total: int | None = None) -> None: ...

    def advance(self, nbytes: int) -> None: ...


class CountingFile:
    """A binary file that reports every byte read from disk to a :class:`ProgressSink`."""

    def __init__(self, path: Path, progress: ProgressSink):
        self._fh = open(path, "rb")  # noqa: SIM115 - owned by this object, closed in close()
        self._progress = progress

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        if data:  # (the empty read at the end reports nothing)
            self._progress.advance(len(data))
        return data

    def peek(self, n: int = 1) -> bytes:
        return self._fh.peek(n)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> CountingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_raw(path: Path, progress: ProgressSink | None) -> BinaryIO:
    if progress is None:
        return open(path, "rb")
    return CountingFile(path, progress)  # type: ignore[return-value]


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
    with open_stream(p) as stream:
        head = stream.read(64 * 1024)
        damage = getattr(stream, "damage", None)
    if is_gz and damage and not head:
        raise TraceCorruptError(f"gzip file, but {damage}", path=p)
    return Sniff(path=p, size=size, gzip=is_gz, head=head)


class GzipStream:
    """Streaming gzip decompression that keeps what it could decompress.

    Unlike :mod:`gzip`, a file cut short or damaged mid-way does not lose the data
    decompressed so far: ``read`` returns it, then reports end of data and records the
    problem in :attr:`damage`.  Concatenated gzip members are read in sequence.  More
    than ``limit`` decompressed bytes raise :class:`TraceTooLargeError` (a gzip bomb).
    """

    def __init__(self, path: Path, limit: int, progress: ProgressSink | None = None, inflate: Any = None):
        self._path = path
        self._fh = _open_raw(path, progress)
        #: the zlib-like module that inflates (:mod:`isal.isal_zlib` when installed, else zlib)
        self._inflate = inflate if inflate is not None else _inflate
        self._d = self._member()
        self._carry = b""
        self._eof = False
        self._count = 0
        self._limit = limit
        #: why the stream ended early, or None when it ended cleanly
        self.damage: str | None = None

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = 1 << 62
        # the pieces zlib hands back, joined only when there is more than one (usually one
        # call fills the whole request: no copy)
        pieces: list[bytes] = []
        got = 0
        while got < n and not self._eof:
            data = self._d.unconsumed_tail or self._carry or self._fh.read(1 << 20)
            self._carry = b""
            if not data:
                if not self._d.eof:
                    self.damage = "the compressed stream ends early (the file was cut)"
                self._eof = True
                break
            try:
                piece = self._d.decompress(data, n - got)
            except _INFLATE_ERRORS as exc:
                self.damage = f"the compressed data is damaged ({exc})"
                self._eof = True
                break
            if piece:
                pieces.append(piece)
                got += len(piece)
            if self._d.eof:
                rest = self._d.unused_data
                if rest.lstrip(b"\0"):
                    self._d = self._member()
                    self._carry = rest
                else:
                    self._eof = not self._fh.peek(1) if hasattr(self._fh, "peek") else True
                    if not self._eof:
                        self._d = self._member()
        self._count += got
        if self._count > self._limit:
            raise TraceTooLargeError(
                f"decompressed size exceeds the limit of {self._limit:,} bytes (possible gzip bomb)",
                path=self._path,
                hint="raise the limit with TRACEKIT_MAX_BYTES=<bytes> if the file is genuine",
            )
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _member(self) -> Any:
        """A decompressor for the next gzip member (header and CRC checked)."""
        return self._inflate.decompressobj(16 + zlib.MAX_WBITS)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> GzipStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_stream(path: str | Path, *, progress: ProgressSink | None = None) -> BinaryIO:
    """Open ``path`` for reading decompressed bytes (gzip detected by magic, not by name).

    With ``progress``, the bytes read from the file (compressed bytes for gzip) are reported
    to ``progress.advance`` as they are read, so a reader shows how far through the file it is
    whatever decodes the stream.
    """
    p = Path(path)
    with open(p, "rb") as fh:
        magic = fh.read(2)
    if magic == GZIP_MAGIC:
        return GzipStream(p, max_decompressed_bytes(), progress)  # type: ignore[return-value]
    return _open_raw(p, progress)


class ReadAhead:
    """Reads the next blocks of ``inner`` in a background thread while the caller parses.

    Decompression (ISA-L or zlib) and file reads release the GIL, so on a multi-core machine
    they overlap with decoding.  Errors raised by ``inner`` (a gzip bomb, an I/O error) are
    re-raised in the reading thread's caller; ``damage`` mirrors ``inner.damage`` at the end.
    """

    def __init__(self, inner: BinaryIO, block: int = 8 * 1024 * 1024, depth: int = 2, first: int | None = None):
        self._inner = inner
        self._block = block
        #: the first block's size (default ``block``): a smaller one reaches the caller sooner
        self._first = first if first is not None and first > 0 else block
        self._queue: queue.Queue[tuple[bytes, BaseException | None]] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._pending = b""
        self._done = False
        self.damage: str | None = None
        self._thread = threading.Thread(target=self._run, name="tracekit-read-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            size = self._first
            while not self._stop.is_set():
                data = self._inner.read(size)
                size = self._block
                self._queue.put((data, None))
                if not data:
                    return
        except BaseException as exc:
            self._queue.put((b"", exc))

    def _next_block(self) -> bytes:
        """The reader thread's next block; b"" at the end of the data (its error re-raised here)."""
        data, exc = self._queue.get()
        if exc is not None:
            self._done = True
            raise exc
        if not data:
            self._done = True
            self.damage = getattr(self._inner, "damage", None)
        return data

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes: what is left of the current block, or the next block, never
        more than one block at a time (a short read; b"" only at the end of the data).
        A whole block is handed over as it came from the reader thread, without a copy."""
        if n is None or n < 0:
            n = 1 << 62
        if not self._pending:
            if self._done:
                return b""
            data = self._next_block()
            if len(data) <= n:
                return data
            self._pending = data
        if len(self._pending) <= n:
            data, self._pending = self._pending, b""
            return data
        data, self._pending = self._pending[:n], self._pending[n:]
        return data

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=0.05)
        self._inner.close()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Prefetch(Generic[T]):
    """Runs an iterator in a background thread, ahead of its consumer.

    The items arrive in the iterator's order.  Native work that releases the GIL (the
    Kineto scanner, zlib, polars' queries) in the producer overlaps with the consumer's
    work on the previous item, so a two-stage parse uses two cores.  At most ``depth``
    items exist at once, counting the one the consumer holds and the one being produced
    (the producer starts an item only when fewer are out; the consumer gives its item back
    by asking for the next one), so the memory of the pipeline stays bounded.  An exception
    raised by the iterator is re-raised in the consumer, after the items produced before it.
    Closing (or leaving the ``with`` block early) stops the producer after its current item
    and waits for it.
    """

    def __init__(self, produce: Callable[[], Iterator[T]], depth: int = 2):
        self._queue: queue.Queue[tuple[int, Any]] = queue.Queue()
        self._slots = threading.Semaphore(max(1, depth))
        self._stop = threading.Event()
        self._produce = produce
        self._thread = threading.Thread(target=self._run, name="tracekit-prefetch", daemon=True)
        self._thread.start()

    def _slot(self) -> bool:
        """Wait for room for one more item; False once the consumer has closed."""
        while not self._stop.is_set():
            if self._slots.acquire(timeout=0.05):
                return True
        return False

    def _run(self) -> None:
        items = self._produce()
        try:
            while self._slot():
                try:
                    item = next(items)
                except StopIteration:
                    self._queue.put((_END, None))
                    return
                self._queue.put((_ITEM, item))
                del item
        except BaseException as exc:  # handed to the consumer, raised there
            self._queue.put((_ERROR, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:  # a generator stopped early: its with-blocks exit here
                close()

    def __iter__(self) -> Iterator[T]:
        while True:
            kind, value = self._queue.get()
            if kind == _END:
                return
            if kind == _ERROR:
                raise value
            yield value
            del value
            self._slots.release()  # the consumer is done with that item

    def close(self) -> None:
        self._stop.set()
        # the producer stops at its next item and closes its iterator itself; the wait is
        # bounded so that an interrupt (Ctrl-C, a caller's alarm) is never held up by it
        self._thread.join(timeout=CLOSE_WAIT_SECONDS)
        while not self._queue.empty():  # items nobody will consume
            self._queue.get_nowait()

    def __enter__(self) -> Prefetch[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_ITEM, _ERROR, _END = range(3)
#: how long closing a Prefetch waits for its producer to finish the item in hand
CLOSE_WAIT_SECONDS = 5.0
