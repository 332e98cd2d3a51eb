"""The Kineto reader's byte front end: gzip pieces, read-ahead blocks, the prefetch thread."""

from __future__ import annotations

import gzip
import io
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tracekit.errors import TraceTooLargeError
from tracekit.parsers._source import GzipStream, Prefetch, ReadAhead


class _Blocks(io.RawIOBase):
    """A stream that returns at most ``block`` bytes a read (like a file or GzipStream)."""

    def __init__(self, data: bytes, block: int):
        self._data, self._pos, self._block = data, 0, block

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        n = self._block if n is None or n < 0 else min(n, self._block)
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out


def _read_all(stream: ReadAhead, n: int) -> list[bytes]:
    pieces = []
    while piece := stream.read(n):
        assert 0 < len(piece) <= n
        pieces.append(bytes(piece))
    return pieces


@pytest.mark.parametrize("n", [1, 7, 100, 256, 1000, 10_000])
def test_read_ahead_gives_every_byte_in_order_never_more_than_asked(n: int) -> None:
    data = bytes(range(256)) * 37
    with ReadAhead(_Blocks(data, 256), block=256) as stream:  # type: ignore[arg-type]
        pieces = _read_all(stream, n)
    assert b"".join(pieces) == data
    if n >= 256:  # short reads: one block at a time, each handed over whole
        assert all(len(p) == 256 for p in pieces[:-1])


def test_read_ahead_first_block_is_smaller_then_whole_blocks() -> None:
    data = bytes(range(256)) * 37
    with ReadAhead(_Blocks(data, 10_000), block=1000, first=300) as stream:  # type: ignore[arg-type]
        pieces = _read_all(stream, 10_000)
    assert b"".join(pieces) == data
    assert [len(p) for p in pieces[:3]] == [300, 1000, 1000]


def test_read_ahead_reraises_the_reader_error() -> None:
    class Broken(_Blocks):
        def read(self, n: int = -1) -> bytes:  # type: ignore[override]
            if self._pos:
                raise OSError("disk gone")
            return super().read(n)

    with ReadAhead(Broken(b"x" * 1000, 100), block=100) as stream:  # type: ignore[arg-type]
        assert stream.read(100) == b"x" * 100
        with pytest.raises(OSError, match="disk gone"):
            stream.read(100)
        assert stream.read(100) == b""


def _inflaters() -> list[Any]:
    """The inflate modules a GzipStream may use: ISA-L's (the default, when installed) and
    zlib (where the wheel is missing); every behaviour below holds for both."""
    found: list[Any] = [pytest.param(zlib, id="zlib")]
    try:
        from isal import isal_zlib
    except ImportError:  # pragma: no cover - isal is a dependency
        return found
    return [pytest.param(isal_zlib, id="isal"), *found]


INFLATERS = _inflaters()


def _gz(tmp_path: Path, payload: bytes, members: int = 1) -> Path:
    path = tmp_path / "t.json.gz"
    path.write_bytes(b"".join(gzip.compress(payload) for _ in range(members)))
    return path


@pytest.mark.parametrize("inflate", INFLATERS)
def test_gzip_stream_members_and_short_requests(tmp_path: Path, inflate: Any) -> None:
    payload = b'{"a": 1}, ' * 50_000
    path = _gz(tmp_path, payload, members=3)
    with GzipStream(path, limit=1 << 30, inflate=inflate) as stream:
        out = []
        while piece := stream.read(65_536):
            assert len(piece) <= 65_536
            out.append(piece)
        assert stream.damage is None
    assert b"".join(out) == payload * 3


@pytest.mark.parametrize("inflate", INFLATERS)
def test_gzip_stream_keeps_what_it_could_decompress_of_a_cut_file(tmp_path: Path, inflate: Any) -> None:
    payload = bytes(range(256)) * 4096
    whole = gzip.compress(payload, compresslevel=1)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with GzipStream(path, limit=1 << 30, inflate=inflate) as stream:
        got = stream.read(-1)
        assert stream.read(10) == b""
        assert stream.damage is not None
        assert "ends early" in stream.damage
    assert 0 < len(got) < len(payload)
    assert payload.startswith(got)


@pytest.mark.parametrize("inflate", INFLATERS)
def test_gzip_stream_limit(tmp_path: Path, inflate: Any) -> None:
    path = _gz(tmp_path, b"\0" * 3_000_000)

    def read_all() -> None:
        with GzipStream(path, limit=1_000_000, inflate=inflate) as stream:
            while stream.read(400_000):
                pass

    with pytest.raises(TraceTooLargeError, match="gzip bomb"):
        read_all()


@pytest.mark.parametrize("inflate", INFLATERS)
def test_gzip_stream_a_wrong_checksum_is_damage_with_the_data_before_it(tmp_path: Path, inflate: Any) -> None:
    payload = b'{"a": 1}, ' * 20_000
    whole = bytearray(gzip.compress(payload))
    whole[-6] ^= 0x40  # a bit of the member's CRC-32
    path = tmp_path / "crc.json.gz"
    path.write_bytes(bytes(whole))
    with GzipStream(path, limit=1 << 30, inflate=inflate) as stream:
        got = b"".join(iter(lambda: stream.read(65_536), b""))
        assert stream.damage is not None
        assert "damaged" in stream.damage
    assert payload.startswith(got)


def test_gzip_stream_inflates_with_isal_when_installed(tmp_path: Path) -> None:
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    with GzipStream(_gz(tmp_path, b"{}"), limit=1 << 30) as stream:
        assert stream._inflate is isal_zlib
        assert stream.read(-1) == b"{}"


def test_prefetch_keeps_order_and_raises_after_the_items_before_the_error() -> None:
    def produce() -> Iterator[int]:
        yield from range(50)
        raise ValueError("bad chunk 50")

    seen: list[int] = []

    def consume() -> None:
        with Prefetch(produce, depth=2) as items:
            seen.extend(items)

    with pytest.raises(ValueError, match="bad chunk 50"):
        consume()
    assert seen == list(range(50))


def test_prefetch_stops_the_producer_when_the_consumer_leaves_early() -> None:
    closed = threading.Event()
    produced: list[int] = []

    def produce() -> Iterator[int]:
        try:
            for i in range(10_000):
                produced.append(i)
                yield i
        finally:
            closed.set()  # the producer's with-blocks (the open file) are left here

    with Prefetch(produce, depth=1) as items:
        for item in items:
            if item == 3:
                break
    assert closed.is_set()
    assert len(produced) <= 3 + 3  # at most a few items ahead of the consumer


def test_prefetch_close_does_not_wait_for_a_stuck_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracekit.parsers._source as source

    monkeypatch.setattr(source, "CLOSE_WAIT_SECONDS", 0.2)
    release = threading.Event()

    def produce() -> Iterator[int]:
        yield 1
        release.wait(10)  # an item that takes long (a huge chunk, a slow disk)
        yield 2

    prefetch = Prefetch(produce)
    assert next(iter(prefetch)) == 1
    prefetch.close()  # returns although the producer is still busy
    release.set()
    prefetch._thread.join(5)
    assert not prefetch._thread.is_alive()  # it stopped on its own at the next item
