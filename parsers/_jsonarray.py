"""Streaming the ``traceEvents`` array of a Chrome trace in chunks of whole events.

A Chrome trace is either ``{"...": ..., "traceEvents": [ev, ev, ...], "...": ...}`` or a
bare array ``[ev, ev, ...`` (whose closing bracket may legally be missing).  Profilers
write hundreds of MB to several GB of it, so this module never holds the whole document:
it reads the decompressed stream in blocks, cuts the array between two events (at a
``}`` ``,`` ``{`` boundary, verified by decoding), and yields each chunk as a valid JSON
array text.  The bytes before and after the array are kept so the caller can decode the
top-level metadata.

When the file ends early (a profiler killed mid-write) the chunker keeps every complete
event before the cut and reports how many bytes were lost.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

_ARRAY_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_WS = b" \t\r\n"
#: a cut between two events, with JSON's own blanks only (group 2: the comma); each run of
#: blanks is taken whole by a lookahead and a backreference (an atomic group, which Python
#: 3.10 lacks), so that a ``}`` before megabytes of blanks and no comma is given up at once
#: instead of after trying every shorter run
_CUT = re.compile(rb"\}(?=([ \t\r\n]*))\1(,)(?=([ \t\r\n]*))\3\{")
#: the start of a cut that more bytes may still complete: ``}``, blanks, at most one comma
_OPEN_CUT = re.compile(rb"\}[ \t\r\n]*(?:,[ \t\r\n]*)?")
#: the first window the backward searches look at (each next one is four times larger)
_FIRST_WINDOW = 4096
#: the largest window :func:`_prev_solid` copies at once
_MAX_WINDOW = 1 << 20
#: how far into the file the traceEvents key is looked for before giving up
HEADER_SEARCH_LIMIT = 512 * 1024 * 1024


class NotATraceArray(Exception):
    """The document has no traceEvents array (carries the decoded head for diagnosis)."""

    def __init__(self, message: str, head: bytes):
        super().__init__(message)
        self.head = head


@dataclass
class ArrayStream:
    """Result holder filled while :func:`iter_event_chunks` runs."""

    #: bytes of the top-level object before the array (``{... "traceEvents": [`` minus the key)
    header: bytes = b""
    #: bytes after the closing ``]`` of the array (``, "traceName": ...}``)
    trailer: bytes = b""
    bare_array: bool = False
    #: True when the input ended (or broke) before the array was closed
    truncated: bool = False
    #: decompressed bytes that could not be used (after the last complete event)
    lost_bytes: int = 0
    #: decompressed bytes read in total
    total_bytes: int = 0
    #: why the input ended early, in words
    truncation_reason: str = ""
    #: decompressed bytes skipped inside the array because they did not decode (damage)
    damaged_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def _read(stream: BinaryIO, n: int, state: ArrayStream) -> tuple[bytes, bool]:
    """Read up to n bytes; returns (data, eof).  A broken compressed stream counts as EOF."""
    try:
        data = stream.read(n)
    except EOFError as exc:  # gzip ended before its end-of-stream marker
        state.truncated = True
        state.truncation_reason = f"compressed stream ends early ({exc})"
        return b"", True
    except (OSError, zlib.error) as exc:  # bad CRC, invalid deflate data
        state.truncated = True
        state.truncation_reason = f"compressed stream is damaged ({exc})"
        return b"", True
    data = data or b""
    state.total_bytes += len(data)
    if not data:
        damage = getattr(stream, "damage", None)
        if damage and not state.truncated:
            state.truncated = True
            state.truncation_reason = damage
    return data, len(data) == 0


def _first_want(chunk_bytes: int, first_bytes: int | None) -> int:
    """The first chunk's size: ``first_bytes`` (at most a chunk), or half a chunk by default."""
    return chunk_bytes // 2 if first_bytes is None else max(1, min(first_bytes, chunk_bytes))


def _strip_bom(data: bytes) -> bytes:
    return data[3:] if data.startswith(b"\xef\xbb\xbf") else data


def iter_event_chunks(
    stream: BinaryIO,
    state: ArrayStream,
    try_decode: Callable[[bytes | memoryview], Any],
    chunk_bytes: int = 16 * 1024 * 1024,
    first_bytes: int | None = None,
) -> Iterator[Any]:
    """Yield ``try_decode(chunk)`` for consecutive chunks of the traceEvents array.

    ``try_decode`` receives a JSON array text (``[ev,ev,...]``) and returns the decoded
    chunk, or raises ``ValueError`` when the text is not valid; the chunker uses that
    to find safe cut points and the last complete event of a truncated file.  The first
    chunk is about ``first_bytes`` long (default: half a chunk), every later one about
    ``chunk_bytes`` (a chunk ends at an event boundary, so any chunk may be longer).
    """
    # the first read asks for a whole chunk: a read-ahead stream then hands over its first
    # block as it is, and every later block stays whole too (no re-slicing copies)
    buf, eof = _read(stream, chunk_bytes, state)
    buf = _strip_bom(buf)
    # --- find the start of the events array
    lead = buf.lstrip(_WS)
    while not lead and not eof:
        # blanks before the document count for nothing: drop them instead of keeping them
        # (memory) and stripping them again after every read (time)
        buf, eof = _read(stream, 1 << 20, state)
        lead = buf.lstrip(_WS)
    if lead[:1] == b"[":
        state.bare_array = True
        start = len(buf) - len(lead) + 1
    elif lead[:1] == b"{":
        match = _ARRAY_KEY.search(buf)
        while match is None and not eof and len(buf) < HEADER_SEARCH_LIMIT:
            more, eof = _read(stream, max(1 << 20, len(buf)), state)
            buf += more
            match = _ARRAY_KEY.search(buf)
        if match is None:
            raise NotATraceArray("no traceEvents array", buf[: 4 * 1024 * 1024])
        state.header = buf[: match.start()]
        start = match.end()
    else:
        raise NotATraceArray("not a JSON object or array", buf[:4096])
    # buf[0] is always the '[' that opens the next chunk; cutting at a ',' between two
    # events turns that comma into ']' for the decode, then into the next chunk's '['.
    work = bytearray(b"[")
    work += memoryview(buf)[start:]
    del buf
    # the first chunk is ``first_bytes`` (default half a chunk), what the first read brought
    # once the header is taken off it: topping it up to a whole chunk would read and scan a
    # second block before the first chunk's rows reach the caller, which waits for them with
    # nothing to do
    want = _first_want(chunk_bytes, first_bytes)
    yield from _stream_chunks(work, eof, stream, state, try_decode, chunk_bytes, want)


def _stream_chunks(
    work: bytearray,
    eof: bool,
    stream: BinaryIO,
    state: ArrayStream,
    try_decode: Callable[[bytes | memoryview], Any],
    chunk_bytes: int,
    want: int,
) -> Iterator[Any]:
    """The chunks of the events array from ``work`` (``[`` and the events read so far) and
    what ``stream`` holds after it, then the tail."""
    # --- stream whole-event chunks
    # no event boundary starts before ``floor`` in ``work``: what has been searched already is
    # not searched again while an event larger than a chunk (or a run of blanks) is read on
    floor = 0
    while True:
        while len(work) < want and not eof:
            more, eof = _read(stream, chunk_bytes, state)
            work += more
        want = chunk_bytes
        if eof:
            break
        decoded, cut = _decode_before(work, _last_boundary(work, len(work), floor), try_decode, floor=floor)
        if decoded is None and cut is None:
            # not one event boundary in this block: an event larger than a chunk, read on
            floor = _boundary_floor(work, floor)
            if _read_to_brace(stream, work, chunk_bytes, state):
                break
            continue
        floor = 0
        if decoded is None:
            # boundaries exist but nothing before them decodes: damaged bytes in this block
            decoded, cut = _longest_prefix(work, try_decode)
            if decoded is not None:
                yield decoded
            work = _skip_damage(work, cut or 0, state)
            continue
        yield decoded
        assert cut is not None
        work[cut] = 0x5B  # '[' opens the next chunk
        try:
            del work[:cut]
        except BufferError:  # a decoded value still references the buffer: copy instead
            work = bytearray(work[cut:])

    # --- the tail: last events, closing bracket, trailer (or a truncated end)
    decoded = _close_in_place(work, state, try_decode)
    if decoded is not _MISS:
        yield decoded
        return
    yield from _finish(bytes(work[1:]), state, try_decode)


def _read_to_brace(stream: BinaryIO, work: bytearray, chunk_bytes: int, state: ArrayStream) -> bool:
    """Append blocks of ``stream`` to ``work`` up to one that holds a ``{`` (every event
    boundary ends with one, so none can appear before); True at the end of the data."""
    while True:
        more, eof = _read(stream, chunk_bytes, state)
        work += more
        if eof or b"{" in more:
            return eof


def _boundary_floor(work: bytearray, floor: int) -> int:
    """Where the first event boundary can start once bytes are appended to ``work``, which
    holds none from ``floor`` on: at the last ``}`` when only blanks and at most one comma
    follow it (a boundary the next bytes may complete), else at the end of ``work``."""
    end = len(work)
    brace = work.rfind(b"}", floor, end)
    if brace >= 0:
        match = _OPEN_CUT.match(work, brace, end)
        if match is not None and match.end() == end:
            return brace
    return end


_MISS = object()


def _close_in_place(work: bytearray, state: ArrayStream, try_decode: Callable[[bytes | memoryview], Any]) -> Any:
    """The usual end of the data (a closed events array and a valid trailer), decoded from
    the chunker's buffer itself (``work[0]`` is the ``[`` before the last events): what step 1
    of :func:`_finish` does, without its copies of the last chunk (four of up to two chunks'
    bytes, on the critical path at the end of the parse).

    It follows step 1 candidate by candidate and gives up (``_MISS``) at the first closing
    bracket whose events do not decode, or when no candidate decodes: :func:`_finish` then
    starts over and decides (the decode has no side effects), so the outcome is its own."""
    end = _prev_solid(work, len(work), 1) + 1
    tried = 0
    skipped = 0
    pos = end
    while tried < 64 and skipped < _MAX_SKIPPED_BRACKETS:
        pos = work.rfind(b"]", 1, pos)
        if pos < 0:
            return _MISS
        # (at work[0], the '[', the test answers as _finish's does at the start of its text)
        if not _may_close_events(work, pos):
            skipped += 1
            continue
        trailer = bytes(work[pos + 1 : end])
        tried += 1
        if _trailer_ok(trailer, state.bare_array):
            try:
                decoded = try_decode(memoryview(work)[: pos + 1])  # "[" + events + "]"
            except ValueError:
                return _MISS
            state.trailer = trailer
            return decoded
    return _MISS


def _decode_at(work: bytearray, cut: int, try_decode: Callable[[bytes | memoryview], Any]) -> Any:
    """Decode ``work[:cut]`` as a closed array (the comma at ``cut`` becomes ']' meanwhile)."""
    work[cut] = 0x5D
    try:
        return try_decode(memoryview(work)[: cut + 1])
    finally:
        work[cut] = 0x2C


def _decode_before(
    work: bytearray, cut: int | None, try_decode: Callable[[bytes | memoryview], Any], tries: int = 4, floor: int = 0
) -> tuple[Any, int | None]:
    """Try the last few boundaries (a cut can fall inside a string); (decoded, cut) or (None, cut).
    ``work[0]`` is the ``[`` that opens the chunk; no boundary starts before ``floor``."""
    last = cut
    for _ in range(tries):
        if cut is None:
            break
        try:
            return _decode_at(work, cut, try_decode), cut
        except ValueError:
            last = cut
            cut = _last_boundary(work, cut - 1, floor)
    return None, last


def _boundaries(buf: bytes | bytearray, start: int = 0) -> list[int]:
    """Positions of every ``,`` between ``}`` and ``{`` (candidate cuts) after ``start``."""
    return [m.start() + m.group().index(b",") for m in _BOUNDARY.finditer(buf, start)]


def _longest_prefix(work: bytearray, try_decode: Callable[[bytes | memoryview], Any]) -> tuple[Any, int | None]:
    """The longest run of whole events from the start that decodes (binary search over cuts)."""
    cuts = _boundaries(work)
    if work.endswith(b",") and (not cuts or cuts[-1] != len(work) - 1):
        cuts.append(len(work) - 1)  # the sentinel after the last event of the data
    best: tuple[Any, int | None] = (None, None)
    lo, hi = 0, len(cuts) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        try:
            decoded = _decode_at(work, cuts[mid], try_decode)
        except ValueError:
            hi = mid - 1
            continue
        best = (decoded, cuts[mid])
        lo = mid + 1
    return best


def _skip_damage(work: bytearray, good_end: int, state: ArrayStream) -> bytearray:
    """Drop the damaged event after ``good_end`` up to the next boundary; note the loss."""
    after = _BOUNDARY.search(work, good_end + 1)
    nxt = after.start() + after.group().index(b",") if after else len(work)
    state.damaged_bytes += nxt - good_end
    rest = bytearray(b"[")
    rest += work[nxt + 1 :]
    return rest


def _last_boundary(buf: bytearray, end: int, floor: int = 0) -> int | None:
    """Position of the last ``,`` in buf[1:end] that sits between ``}`` and ``{`` (blanks
    around it allowed; the ``{`` may lie at or after ``end``), in a boundary that starts at
    ``floor`` or later.  The regular expression runs over windows that grow back from ``end``,
    so a long run of blanks, commas or text costs time in proportion to what is searched."""
    width = _FIRST_WINDOW
    while True:
        start = max(floor, end - width)
        last = None
        for match in _CUT.finditer(buf, start):
            comma = match.start(2)
            if comma >= end:
                break
            last = comma
        if last is not None or start == floor:
            return last
        width *= 4


def _prev_solid(buf: bytes | bytearray, pos: int, floor: int = 0) -> int:
    """Index of the last byte in buf[floor:pos] that is not a JSON blank, or ``floor - 1``;
    windows of blanks are passed over at C speed (``isspace`` also accepts vertical tabs and
    form feeds, which are no JSON blanks: a window holding one is searched byte by byte)."""
    width = 64
    while pos > floor:
        start = max(floor, pos - width)
        window = buf[start:pos]
        if not (window.isspace() and b"\x0b" not in window and b"\x0c" not in window):
            return start + len(window.rstrip(_WS)) - 1
        pos = start
        width = min(width * 4, _MAX_WINDOW)
    return floor - 1


#: closing-bracket candidates tried after the first one whose events fail to decode
_RETRIES_AFTER_DAMAGE = 4
#: brackets that cannot close the events (inside trailer strings, inner arrays) passed over
#: before the search gives up and salvages (bounds the search in a truncated file's tail)
_MAX_SKIPPED_BRACKETS = 4096


def _finish(buf: bytes, state: ArrayStream, try_decode: Callable[[bytes | memoryview], Any]) -> Iterator[Any]:
    body = buf.rstrip(_WS)
    # 1) a properly closed array: try closing brackets from the end whose trailer is valid
    tried = 0
    pos = len(body)
    # the first closing bracket whose trailer is valid but whose events do not decode; a
    # later-found one may still be the real end (a trailer that holds an array of objects,
    # like ``"deviceProperties": [{...}]``, ends with a bracket that looks like the events')
    damaged: int | None = None
    skipped = 0
    while tried < 64 and skipped < _MAX_SKIPPED_BRACKETS:
        pos = body.rfind(b"]", 0, pos)
        if pos < 0 or (damaged is not None and tried >= _RETRIES_AFTER_DAMAGE):
            break
        if not _may_close_events(body, pos):
            # a bracket after a string, number or inner array (e.g. the text of the log lines
            # Kineto writes after the events, ``"INFO": ["...cpp:995] ..."]``) never closes an
            # array of events: not a candidate, and it uses none of the tries
            skipped += 1
            continue
        trailer = body[pos + 1 :]
        if _trailer_ok(trailer, state.bare_array):
            tried += 1
            try:
                decoded = try_decode(b"[" + body[:pos] + b"]")
            except ValueError:
                if damaged is None:
                    damaged, tried = pos, 0
                continue
            state.trailer = trailer
            yield decoded
            return
        else:
            tried += 1
    if damaged is not None:
        # a closed array whose events do not all decode: damage, salvage below
        state.trailer = body[damaged + 1 :]
        body = body[:damaged]
    # 2) a bare array without its closing bracket is legal when the last event is whole
    if state.bare_array and not state.truncated and not state.trailer:
        candidate = body.rstrip(b", \t\r\n")
        if candidate.endswith(b"}") or candidate == b"":
            try:
                decoded = try_decode(b"[" + candidate + b"]")
                yield decoded
                return
            except ValueError:
                pass
    # 3) salvage: runs of whole events that decode, skipping damaged ones in between
    closed = bool(state.trailer)
    work = bytearray(b"[")
    work += body
    if body.rstrip(b", \t\r\n").endswith(b"}"):
        work = bytearray(work.rstrip(b", \t\r\n")) + b","  # a sentinel cut after the last event
    while len(work) > 1:
        decoded, cut = _longest_prefix(work, try_decode)
        if decoded is not None:
            yield decoded
        good_end = cut if cut is not None else 0
        if good_end >= len(work) - 1:
            return  # everything left decoded
        if _BOUNDARY.search(work, good_end + 1) is None:
            # nothing whole after the damage: the end of the data
            lost = len(work) - good_end - 1
            if closed:
                state.damaged_bytes += lost
            else:
                state.truncated = True
                state.lost_bytes = lost
                if not state.truncation_reason:
                    state.truncation_reason = "the file ends before the traceEvents array is closed"
            return
        work = _skip_damage(work, good_end, state)


def _may_close_events(buf: bytes | bytearray, pos: int) -> bool:
    """Whether the ``]`` at ``pos`` can close an array of events: after an object, after
    ``[``, or first in ``buf`` (which starts just after the events array's own ``[``: an empty
    array of events)."""
    i = _prev_solid(buf, pos)
    return i < 0 or buf[i] in (0x7D, 0x5B)  # nothing before it, '}' or '['


def _trailer_ok(trailer: bytes, bare: bool) -> bool:
    t = trailer.strip(_WS)
    if bare:
        return t == b""
    if t == b"}":
        return True
    if not (t.startswith(b",") and t.endswith(b"}")):
        return False
    try:
        json.loads(b'{"_":0' + t)
    except (ValueError, RecursionError):
        return False
    return True
