"""The Kineto reader's input: plain and gzip files streamed through the chunker in chunks
of whole events, whatever the chunk size; truncated and damaged files keep what they can,
the decompressed size is bounded, and progress hears every byte of the file."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tracekit.errors import TraceTooLargeError
from tracekit.parsers._jsonarray import ArrayStream, NotATraceArray, iter_event_chunks
from tracekit.parsers.kineto import read_kineto


def _decode(chunk: bytes | memoryview) -> list[Any]:
    try:
        value = json.loads(bytes(chunk))
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(value, list):
        raise ValueError("not an array")
    return value


def _events(n: int, start: int = 0) -> list[bytes]:
    return [
        json.dumps({"ph": "X", "name": f"op,{{}}[{i}]", "ts": i, "dur": 1, "args": {"l": [i, "]"]}}).encode()
        for i in range(start, start + n)
    ]


_GOOD = b'{"schemaVersion": 1, "traceEvents": [' + b",\n".join(_events(300)) + b'], "deviceProperties": [{"id": 0}]}'
def _events(n: int, start: int = 0) -> list[bytes]:
    return [
        json.dumps({"ph": "X", "name": f"op,{{}}[{i}]", "ts": i, "dur": 1, "args": {"l": [i, "]"]}}).encode()
        for i in range(start, start + n)
    ]


_GOOD = b'{"schemaVersion": 1, "traceEvents": [' + b",\n".join(_events(300)) + b'], "deviceProperties": [{"id": 0}]}'
_DOCS = {
    "object": _GOOD,
    "bom-and-space": b"\xef\xbb\xbf \n" + _GOOD + b"\n\n",
    "bare-closed": b"[" + b",".join(_events(200)) + b"]",
    "bare-unclosed": b"[" + b",".join(_events(200)) + b",\n",
    "truncated": _GOOD[: len(_GOOD) // 2 + 17],
    "truncated-in-header": _GOOD[:20],
    "damaged-middle": _GOOD.replace(b'"ts": 150,', b'"ts": 1$0,'),
    "damaged-near-end": _GOOD.replace(b'"ts": 295,', b'"ts": ??,'),
    "trailer-invalid": _GOOD[:-1] + b"x",
    "empty-array": b'{"traceEvents": []}',
    "no-events-key": b'{"other": [1, 2]}',
    "not-json": b"hello world",
    "only-space": b" \n\t ",
    "one-huge-event": b'{"traceEvents": [' + json.dumps({"ph": "X", "name": "x" * 5000}).encode() + b"]}",
}


def _run(chunks: Any) -> tuple[list[Any], str | None]:
    out: list[Any] = []
    try:
        for chunk in chunks:
            out.extend(chunk)
    except NotATraceArray as exc:
        return out, f"{exc} {exc.head[:64]!r}"
    return out, None


#: the documents whose events json.loads reads as they are
_VALID = ("object", "bom-and-space", "bare-closed", "empty-array", "one-huge-event")


@pytest.mark.parametrize("chunk", [256, 1024, 1 << 16])
@pytest.mark.parametrize("name", sorted(_DOCS))
def test_chunks_hold_the_documents_events_whatever_their_size(name: str, chunk: int) -> None:
    """Every chunk size gives the same events as one chunk of the whole document (a damaged
    one: events of the undamaged document, in order, around what was skipped); a valid one's
    events are those json.loads reads, a cut one's a prefix of the whole's."""
    data = _DOCS[name]
    got = _run(iter_event_chunks(io.BytesIO(data), ArrayStream(), _decode, chunk_bytes=chunk, first_bytes=chunk // 4))
    one = _run(iter_event_chunks(io.BytesIO(data), ArrayStream(), _decode, chunk_bytes=1 << 20))
    if name.startswith("damaged"):
        full = iter(json.loads(_GOOD)["traceEvents"])
        assert got[0]
        assert all(any(event == kept for event in full) for kept in got[0])  # (a subsequence)
    else:
        assert got == one
    if name in _VALID:
        whole = json.loads(data.decode("utf-8-sig"))
        assert got == ((whole if isinstance(whole, list) else whole["traceEvents"]), None)
    if name.startswith("truncated") and got[1] is None:
        full = json.loads(_GOOD)["traceEvents"]
        assert got[0] == full[: len(got[0])]


def _write_gz(path: Path, data: bytes, members: int = 1) -> Path:
    step = -(-len(data) // members)
    path.write_bytes(b"".join(gzip.compress(data[i : i + step]) for i in range(0, len(data), step)))
    return path


def _assert_same_tables(a: Any, b: Any) -> None:
    assert a.info == b.info
    for name in ("events", "links", "flows", "devices", "threads", "counters", "memory"):
        assert a.table(name).equals(b.table(name)), name


@pytest.mark.parametrize("members", [1, 3])
def test_gzip_files_give_the_tables_of_their_content(tmp_path: Path, members: int) -> None:
    """A gzip file (of one member or several) gives the tables of the same content read
    from a plain file."""
    path = _write_gz(tmp_path / "t.json.gz", _sample(), members)
    plain = tmp_path / "t.json"
    plain.write_bytes(_sample())
    for chunk in (4096, 1 << 16):
        gz, text = read_kineto(path, chunk_bytes=chunk), read_kineto(plain, chunk_bytes=chunk)
        _assert_same_tables(gz, dataclasses.replace(text, info=dataclasses.replace(text.info, path=gz.info.path)))


@pytest.mark.parametrize("size_field", [False, True])
@pytest.mark.parametrize("cut", [0.5, 0.97])
def test_truncated_gzip_streams_and_salvages(tmp_path: Path, cut: float, size_field: bool) -> None:
    data = gzip.compress(_sample())
    path = tmp_path / "cut.json.gz"
    # (with a plausible size in its last 4 bytes or not: the stream is read until it breaks)
    path.write_bytes(data[: int(len(data) * cut)] + (b"\0\x10\0\0" if size_field else b""))
    for chunk in (4096, None):
        tables = read_kineto(path, chunk_bytes=chunk)
        assert tables.info.truncated
        assert tables.events.height > 0
        assert any("truncated" in w for w in tables.info.warnings)


def test_damaged_gzip_member_streams_and_keeps_the_events_before_the_damage(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(_sample(), compresslevel=1))
    data[len(data) * 3 // 4] ^= 0x55  # a flipped byte late in the deflate stream
    path = tmp_path / "damaged.json.gz"
    path.write_bytes(bytes(data))
    for chunk in (4096, 1 << 16):
        tables = read_kineto(path, chunk_bytes=chunk)
        assert tables.info.truncated
        assert tables.events.height > 0
        assert any("compressed data is damaged" in w for w in tables.info.warnings)


def test_decompressed_size_limit_holds_on_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _sample()
    path = _write_gz(tmp_path / "t.json.gz", data)
    monkeypatch.setenv("TRACEKIT_MAX_BYTES", str(len(data) - 1))
    for chunk in (4096, None):
        with pytest.raises(TraceTooLargeError, match="exceeds the limit"):
            read_kineto(path, chunk_bytes=chunk)
    monkeypatch.setenv("TRACEKIT_MAX_BYTES", str(len(data)))
    assert read_kineto(path).events.height > 0


class _Progress:
    def __init__(self) -> None:
        self.total = 0

    def phase(self, name: str, total: int | None = None) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        assert nbytes > 0
        self.total += nbytes


@pytest.mark.parametrize("gz", [False, True])
def test_progress_hears_every_byte_of_the_file(tmp_path: Path, gz: bool) -> None:
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    if gz:
        _write_gz(path, _sample())
    else:
        path.write_bytes(_sample())
    progress = _Progress()
    read_kineto(path, progress=progress, chunk_bytes=4096)
    assert progress.total == path.stat().st_size


def _sample() -> bytes:
    events = []
    for i in range(400):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 2, "ts": 10 * i, "dur": 5})
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7, "ts": 10 * i + 2, "dur": 3,
                       "args": {"correlation": i, "stream": 7, "device": 0}})
    return json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "x"}).encode()
