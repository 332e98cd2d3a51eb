"""The Kineto reader's whole-buffer input: a plain file read whole, chunks cut in place.  It must
give what the streaming path gives (the same chunks, the same salvage of truncated and damaged
files), and the streaming path takes every file it cannot be used for (gzip, large files)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
from pathlib import Path
from typing import Any

import parse_digests
import pytest

import tracekit.parsers._source as source
import tracekit.parsers.kineto as kineto
from tracekit.errors import TraceTooLargeError
from tracekit.parsers._jsonarray import ArrayStream, NotATraceArray, iter_buffer_chunks, iter_event_chunks
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


def _fields(state: ArrayStream) -> tuple[Any, ...]:
    return (state.header, state.trailer, state.bare_array, state.truncated, state.lost_bytes,
            state.total_bytes, state.truncation_reason, state.damaged_bytes)


@pytest.mark.parametrize("chunk", [256, 1024, 1 << 16])
@pytest.mark.parametrize("name", sorted(_DOCS))
def test_buffer_chunker_gives_what_the_streaming_chunker_gives(name: str, chunk: int) -> None:
    data = _DOCS[name]
    streamed, by_stream = ArrayStream(), ArrayStream()
    expected = _run(iter_event_chunks(io.BytesIO(data), streamed, _decode, chunk_bytes=chunk, first_bytes=chunk // 4))
    buffer = bytearray(data) + b"\0" * 64  # (room after the data, as a mapping has)
    got = _run(iter_buffer_chunks(buffer, len(data), by_stream, _decode, chunk_bytes=chunk, first_bytes=chunk // 4))
    assert got == expected
    if expected[1] is None:
        assert _fields(by_stream) == _fields(streamed)


def test_buffer_chunker_reports_consumed_offsets_in_order() -> None:
    seen: list[int] = []
    buffer = bytearray(_GOOD)
    chunks = list(iter_buffer_chunks(buffer, len(_GOOD), ArrayStream(), _decode, chunk_bytes=512, consumed=seen.append))
    assert len(chunks) > 10
    assert seen == sorted(seen)
    assert seen[-1] == len(_GOOD)


def _write_gz(path: Path, data: bytes, members: int = 1) -> Path:
    step = -(-len(data) // members)
    path.write_bytes(b"".join(gzip.compress(data[i : i + step]) for i in range(0, len(data), step)))
    return path


def _digest_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    whole = parse_digests.file_digest(path)
    with monkeypatch.context() as m:
        m.setattr(kineto, "open_whole", lambda *a, **k: None)
        streamed = parse_digests.file_digest(path)
    return whole, streamed


def _whole_ok(path: Path) -> bool:
    whole = source.open_whole(path, head=4096)
    if whole is None:
        return False
    with whole:
        return whole.ready()


def _tables_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> tuple[Any, Any]:
    whole = read_kineto(path, chunk_bytes=chunk)
    with monkeypatch.context() as m:
        m.setattr(kineto, "open_whole", lambda *a, **k: None)
        streamed = read_kineto(path, chunk_bytes=chunk)
    return whole, streamed


def _assert_same_tables(a: Any, b: Any) -> None:
    assert a.info == b.info
    for name in ("events", "links", "flows", "devices", "threads", "counters", "memory"):
        assert a.table(name).equals(b.table(name)), name


@pytest.mark.parametrize("size_field", [False, True])
@pytest.mark.parametrize("cut", [0.5, 0.97])
def test_truncated_gzip_streams_and_salvages(tmp_path: Path, cut: float, size_field: bool) -> None:
    data = gzip.compress(_sample())
    path = tmp_path / "cut.json.gz"
    # (with a plausible size in its last 4 bytes or not: a gzip file is never read whole)
    path.write_bytes(data[: int(len(data) * cut)] + (b"\0\x10\0\0" if size_field else b""))
    assert not _whole_ok(path)  # a gzip file: the streaming path decides
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
    assert not _whole_ok(path)
    for chunk in (4096, 1 << 16):
        tables = read_kineto(path, chunk_bytes=chunk)
        assert tables.info.truncated
        assert tables.events.height > 0
        assert any("compressed data is damaged" in w for w in tables.info.warnings)


def test_plain_json_read_whole_gives_the_same_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(_sample())
    data = path.read_bytes()
    with source.open_whole(path) as whole:  # type: ignore[union-attr]
        assert whole.ready()
        assert whole.size == len(data)
        assert whole.buffer[: whole.size] == data
    a, b = _digest_both_ways(path, monkeypatch)
    assert not parse_digests.differences(a, b)
    assert path.read_bytes() == data  # the cuts written into the mapping never reach the file


def test_plain_file_cut_short_while_read_ends_early_without_a_crash(tmp_path: Path) -> None:
    # a profiler rewriting its trace while it is parsed: the file is shorter than its size at
    # open (a mapped file would kill the reader with SIGBUS); the content read is what there is
    path = tmp_path / "t.json"
    data = _sample()
    path.write_bytes(data[: len(data) // 2])
    with source._read_whole(path, len(data), None, b"") as whole:
        assert whole.ready()
        assert whole.size == len(data) // 2
        assert whole.buffer[: whole.size] == data[: len(data) // 2]


@pytest.mark.parametrize("members", [1, 3])
def test_gzip_files_stream_and_give_the_tables_of_their_content(tmp_path: Path, members: int) -> None:
    """A gzip file (of one member or several) is never held whole; its tables are those of
    the same content read whole from a plain file."""
    path = _write_gz(tmp_path / "t.json.gz", _sample(), members)
    plain = tmp_path / "t.json"
    plain.write_bytes(_sample())
    assert source.open_whole(path) is None
    assert _whole_ok(plain)
    for chunk in (4096, 1 << 16):
        gz, whole = read_kineto(path, chunk_bytes=chunk), read_kineto(plain, chunk_bytes=chunk)
        _assert_same_tables(gz, dataclasses.replace(whole, info=dataclasses.replace(whole.info, path=gz.info.path)))


def test_decompressed_size_limit_holds_on_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _sample()
    path = _write_gz(tmp_path / "t.json.gz", data)
    monkeypatch.setenv("TRACEKIT_MAX_BYTES", str(len(data) - 1))
    assert not _whole_ok(path)
    for chunk in (4096, None):
        with pytest.raises(TraceTooLargeError, match="exceeds the limit"):
            read_kineto(path, chunk_bytes=chunk)
    monkeypatch.setenv("TRACEKIT_MAX_BYTES", str(len(data)))
    assert read_kineto(path).events.height > 0


def test_large_files_are_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_gz(tmp_path / "t.json.gz", _sample())
    monkeypatch.setattr(source, "WHOLE_MAX_BYTES", 1000)
    assert source.open_whole(path) is None
    plain = tmp_path / "t.json"
    plain.write_bytes(_sample())
    assert source.open_whole(plain) is None


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


_RECORDED = json.loads(parse_digests.DIGESTS.read_text())
_FILES = dict(parse_digests.trace_files())


def _streamed_params() -> list[object]:
    out = []
    for key in sorted(_RECORDED):
        if key.endswith((".json", ".json.gz")):
            marks = [pytest.mark.shared, pytest.mark.slow] if key.startswith("shared/") else []
            out.append(pytest.param(key, marks=marks, id=key))
    return out


@pytest.mark.parametrize("key", _streamed_params())
def test_streaming_path_still_matches_recorded_digest(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parse-equivalence digests take the whole-buffer path for plain files; the
    streaming path (large files) must still give the recorded tables too."""
    path = _FILES.get(key)
    if path is None:
        pytest.skip(f"trace not available: {key}")
    monkeypatch.setattr(kineto, "open_whole", lambda *a, **k: None)
    diff = parse_digests.differences(_RECORDED[key], parse_digests.file_digest(path))
    assert not diff, f"{key}: " + "; ".join(diff)
