"""The end of the events array decoded in place (``_close_in_place``) gives exactly what the
general tail search (``_finish``) gives, on closed, bare, damaged and truncated endings."""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from typing import Any

import pytest

from tracekit.parsers import _jsonarray
from tracekit.parsers._jsonarray import ArrayStream, iter_event_chunks

_EVENTS = b",".join(b'{"ph":"X","name":"op%d","ts":%d,"dur":1}' % (i, i) for i in range(40))

TAILS = {
    "closed object": b'{"traceEvents":[' + _EVENTS + b'],"traceName":"t"}',
    "closed, whitespace after": b'{"traceEvents":[' + _EVENTS + b'] ,\n "x": [1, 2] }\n\n  ',
    "trailer with an array of objects": b'{"traceEvents":[' + _EVENTS + b'],"deviceProperties":[{"id":0}]}',
    "log lines after the events": b'{"traceEvents":[' + _EVENTS + b'],"INFO":["a.cpp:9] x"]}',
    "bare array": b"[" + _EVENTS + b"]\n",
    "bare array, not closed": b"[" + _EVENTS + b",\n",
    "damaged last event": b'{"traceEvents":[' + _EVENTS + b',{"ph":"X",,}],"traceName":"t"}',
    "truncated": b'{"traceEvents":[' + _EVENTS + b',{"ph":"X","na',
    "empty events": b'{"traceEvents":[],"traceName":"t"}',
    "invalid trailer": b'{"traceEvents":[' + _EVENTS + b'],"traceName":}',
}


def _decode(chunk: bytes | memoryview) -> Any:
    try:
        return json.loads(bytes(chunk))
    except json.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None


def _run(data: bytes, chunk_bytes: int) -> tuple[list[Any], dict[str, Any]]:
    state = ArrayStream()
    chunks = list(iter_event_chunks(io.BytesIO(data), state, _decode, chunk_bytes=chunk_bytes))
    return chunks, asdict(state)


@pytest.mark.parametrize("name", sorted(TAILS))
@pytest.mark.parametrize("chunk_bytes", [64, 1 << 20])
def test_in_place_end_equals_the_tail_search(name: str, chunk_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    data = TAILS[name]
    fast = _run(data, chunk_bytes)
    monkeypatch.setattr(_jsonarray, "_close_in_place", lambda *args: _jsonarray._MISS)
    assert fast == _run(data, chunk_bytes)


def test_in_place_end_is_used_for_a_closed_array() -> None:
    seen: list[type] = []

    def decode(chunk: bytes | memoryview) -> Any:
        seen.append(type(chunk))
        return _decode(chunk)

    state = ArrayStream()
    chunks = list(iter_event_chunks(io.BytesIO(TAILS["closed object"]), state, decode, chunk_bytes=1 << 20))
    assert len(chunks) == 1
    assert len(chunks[0]) == 40
    assert seen == [memoryview]  # the buffer itself, no copy of the events
    assert state.trailer == b',"traceName":"t"}'


@pytest.mark.parametrize("first_bytes", [None, 100])
def test_a_small_first_chunk_comes_first_and_keeps_every_event(first_bytes: int | None) -> None:
    from tracekit.parsers._source import ReadAhead

    data = b'{"traceEvents":[' + _EVENTS + b'],"traceName":"t"}'
    state = ArrayStream()
    # a read-ahead stream whose first block is short, as read_kineto opens it
    with ReadAhead(io.BytesIO(data), block=1200, first=150) as stream:
        chunks = list(iter_event_chunks(stream, state, _decode, chunk_bytes=1200, first_bytes=first_bytes))  # type: ignore[arg-type]
    assert [e["name"] for chunk in chunks for e in chunk] == [f"op{i}" for i in range(40)]
    assert state.trailer == b',"traceName":"t"}'
    if first_bytes is None:  # the first chunk waits for half a chunk of events
        assert sum(len(json.dumps(e)) for e in chunks[0]) >= 600 - 100
    else:  # the first chunk is what the short first block brought: a few events
        assert 1 <= len(chunks[0]) <= 4 < len(chunks[1])
