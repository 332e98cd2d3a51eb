"""The native Kineto scanner (tracekit/native/_kineto_scan.c) against the msgspec path it replaces.

Each tiny chunk is decoded both ways: the scanner either gives exactly the frame
``_kineto_decode.raw_frame`` gives, or leaves the chunk to the msgspec path (None), or, for text that is
not JSON, says so (ValueError, as the msgspec path does).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.native import compiled
from tracekit.parsers import _kineto_decode as kineto_decode
from tracekit.parsers import _kineto_fields as kineto_fields
from tracekit.parsers import _kineto_parts as kineto_parts
from tracekit.parsers import _kineto_scanner as kineto_scanner
from tracekit.parsers import kineto

NATIVE = compiled("kineto_scan")
needs_native = pytest.mark.skipif(
    NATIVE is None, reason="the native scanner was not built (no C compiler when tracekit was installed)"
)


def _msgspec_frame(chunk: bytes):  # type: ignore[no-untyped-def]
    return kineto_decode.raw_frame(kineto_decode.decode_chunk(chunk, [0]), [0])


#: chunks the scanner decodes itself
SCANNED = {
    "empty": b"[]",
    "escapes": rb'[{"ph":"X","cat":"cpu_op","name":"a\"b\\c\/d\b\f\n\r\t","pid":1,"tid":2,"ts":5,"dur":1}]',
    "unicode escapes": rb'[{"ph":"X","cat":"kernel","name":"\u00e9\u6f22\ud83d\ude00 \u0000","ts":1}]',
    "raw utf8": '[{"ph":"X","cat":"kernel","name":"é漢😀","ts":1}]'.encode(),
    "exponents": b'[{"ph":"X","cat":"kernel","ts":1.5e3,"dur":2E-1},{"ph":"X","ts":-3.25,"dur":1e0}]',
    "float ts next to int ts": b'[{"ph":"X","ts":1712345678901234},{"ph":"X","ts":1712345678901.234}]',
    "long decimals": b'[{"ph":"X","ts":3605057436108.40712345678901234,"dur":0.0000000001}]',
    "negative numbers": b'[{"ph":"X","cat":"kernel","pid":-5,"tid":-0,"ts":-7,"args":{"correlation":-1}}]',
    "int64 limits": b'[{"ph":"X","pid":9223372036854775807,"tid":-9223372036854775808,"ts":1}]',
    "string pids": b'[{"ph":"X","pid":"Spans","tid":" 42 ","ts":1},{"ph":"i","pid":"7","tid":"stream 7","ts":2}]',
    "string id": b'[{"ph":"s","cat":"ac2g","id":"0x1f","pid":1,"tid":1,"ts":3}]',
    "missing fields": b'[{},{"ph":"X"},{"name":null,"ts":null}]',
    "unknown keys of any size": b'[{"ph":"X","cat":"cpu_op","x":1e400,"y":123456789012345678901234567890,'
    b'"z":[true,false,null,{"a":[]}],"args":{"Comms Id":10159970886766084423,"External id":3}}]',
    "args before ph": b'[{"args":{"External id":5,"correlation":9},"cat":"cuda_runtime","ph":"X","ts":1}]',
    "grid and block": b'[{"ph":"X","cat":"kernel","ts":1,"args":{"grid":[1048576,1,1],"block":[2,3]}},'
    b'{"ph":"X","cat":"Kernel","ts":2,"args":{"grid":[],"block":[0,5,5]}}]',
    "process group ranks": b'[{"ph":"X","cat":"cpu_op","ts":1,"args":{"Process Group Ranks":"[0, 1, 2]"}},'
    b'{"ph":"X","cat":"kernel","ts":2,"args":{"Process Group Ranks":[0, 1]}},'
    b'{"ph":"X","cat":"kernel","ts":3,"args":{"Process Group Ranks":"oops"}}]',
    "string and odd int args": b'[{"ph":"X","cat":"kernel","ts":1,"args":{"stream":"7","device":" 3 ","bytes":"1e3",'
    b'"correlation":"x","est. achieved occupancy %":"high"}},'
    b'{"ph":"X","cat":"kernel","ts":2,"args":{"est. achieved occupancy %":50,"registers per thread":32}}]',
    "raw inputs": b'[{"ph":"X","cat":"cpu_op","ts":1,"args":{"Input Dims":[[2, 3], []],"Input type":["float", ""],'
    b'"Concrete Inputs":["", "1"],"Sequence number":4,"Seq":1,"seq":2}}]',
    "memory instant": b'[{"ph":"i","name":"[memory]","ts":1,"args":{"Device Type":1,"Device Id":0,"Addr":140,'
    b'"Bytes":512,"Total Allocated":1024,"Total Reserved":2048}}]',
    "metadata": b'[{"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"stream 7"}},'
    b'{"name":"process_sort_index","ph":"M","pid":1,"args":{"sort_index":5}}]',
    "python frames": b'[{"ph":"X","cat":"python_function","ts":1,"args":{"Python id":3,"Python parent id":1}}]',
    "args of other groups ignored": b'[{"ph":"X","cat":"cuda_runtime","ts":1,"args":{"stream":"not an int here"}},'
    b'{"ph":"f","ts":1,"args":[1,2]}]',
    "negative floats beyond the fast path": b'[{"ph":"X","ts":-3.922337203685477580825,"dur":-1e-30},'
    b'{"ph":"X","ts":-9007199254740993.5,"dur":-1.5e300,"cat":"kernel","args":{"est. achieved occupancy %":-2e-40}}]',
    "integer times past int64 in nanoseconds": b'[{"ph":"X","ts":9223372036854776,"dur":-9223372036854776},'
    b'{"ph":"X","ts":-5,"dur":7},{"ph":"X","ts":-9223372036854775808},{"ph":"X","dur":0}]',
    "first float after ints and nulls": b'[{"ph":"X"},{"ph":"X","ts":5,"dur":null},{"ph":"X","ts":null},'
    b'{"ph":"X","ts":-7,"dur":3},{"ph":"X","ts":2.5,"dur":1},{"ph":"X","ts":9,"dur":0.5}]',
    "texts around the inline view limit": b'[{"ph":"X","cat":"","name":"","ts":1},{"ph":"X","cat":"cpu_op",'
    b'"name":"twelve bytes","ts":2},{"ph":"X","name":"thirteen byte","pid":"123456789012","tid":"1234567890123"},'
    rb'{"ph":"X","name":"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9","ts":3},{"ph":"X"}]',
    "pretty printed": b'[\n  {\n    "ph": "X", "cat": "kernel",\n    "ts": 1.0,\n    "args": {\n      "device": 0\n    }\n  }\n]',
    # digits are read up to eight at a time, string bodies and blanks 16 bytes at a time:
    # every length around those steps, and values right before the end of the chunk
    "digit runs of every length": b"["
    + b",".join(
        b'{"ph":"X","pid":%s,"tid":-%s,"ts":%s.%s,"dur":0.%s}' % (d[:n], d[:n], d[:n], d[: 20 - n], b"0" * n + d[:3])
        for d in [b"9182736450918273645"]
        for n in range(1, 20)
    )
    + b',{"ph":"X","ts":100000000,"dur":12345678.87654321},{"ph":"X","ts":7}]',
    "strings around 16-byte steps": b"["
    + b",".join(
        b'{"ph":"X","name":"%s%s%s","cat":"%s","ts":1}' % (b"n" * k, tail, b"m" * (k % 5), b"c" * k)
        for k in range(11, 35)
        for tail in (b"", b'\\"', "é".encode(), b"\\u00e9")
    )
    + b"]",
    "blank runs of every length": b"["
    + b",".join(b'%s{%s"ph"%s:%s"X",\n%s"ts": 1}' % ((b" " * k, b"\n" * k, b"\t" * (k % 3), b"\r\n" * k, b" " * k)) for k in range(0, 40))
    + b"]",
}


# The scanner remembers the text between one member of an object and the next (separator,
# key, colon, whitespace) and recognises it again by comparing bytes: pretty-printed events
# of a few shapes, repeated, with every near miss of a remembered text (other whitespace, a
# key one byte longer or shorter, a key added or left out, the end of the object sooner).
_SHAPES = (
    b'{\n    "ph": "X", "cat": "kernel", "name": "k%(i)d", "pid": 0, "tid": 7,\n    "ts": 16835649023494%(i)02d, '
    b'"dur": %(i)d,\n    "args": {\n      "External id": %(i)d,\n      "queued": 0, "device": 0, "context": 1,\n'
    b'      "stream": 7, "correlation": %(i)d,\n      "blocks per SM": 0.0740%(i)d,\n      "grid": [%(i)d, 1, 1],\n'
    b'      "block": [128, 1, 1],\n      "est. achieved occupancy %%": %(i)d\n    }\n  }',
    b'{\n    "ph": "f", "id": %(i)d, "pid": 0, "tid": 7, "ts": 16835649023494%(i)02d,\n    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }',
    b'{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4515, "tid": 4515,\n'
    b'    "ts": 1683564902164%(i)03d, "dur": 6,\n    "args": {\n      "External id": %(i)d,\n      "cbid": 211, "correlation": %(i)d\n    }\n  }',
    b'{\n    "ph": "s", "id": %(i)d, "pid": 4515, "tid": 4515, "ts": 1683564902164%(i)03d,\n    "cat": "ac2g", "name": "ac2g"\n  }',
    b'{\n    "ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 4515, "tid": 25556,\n    "ts": 36050615576%(i)02d.137, "dur": 0.%(i)d,\n'
    b'    "args": {\n      "External id": %(i)d,"Ev Idx": %(i)d, "Input Dims": [[128], [], [%(i)d]], "Input type": ["float", "", "Scalar"]\n    }\n  }',
)
_NEAR_MISSES = (
    b'{\n    "ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 4515, "tid": 25556,\n    "ts": 3605061557610, "dur": 1,\n'
    b'    "args": {\n      "External id": 9,"Ev Idx": 9, "Sequence number": 4, "Input Dims": [[128]], "Input type": ["float"]\n    }\n  }',
    b'{\n    "ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 4515, "tid": 25556,\n    "ts": 3605061557611, "dur": 1,\n'
    b'    "args": {\n      "External id": 10,"Ev Idx": 10\n    }\n  }',
    b'{\n    "ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 4515, "tid": 25556,\n    "tsx": 1, "ts": 3605061557612, "dur": 1\n  }',
    b'{\n    "ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 4515, "tid": 25556,\n    "t": 2, "ts": 3605061557613, "dur": 1\n  }',
    b'{\n    "ph":  "X", "cat":"Kernel", "name": "k", "pid": 0, "tid": 7,\n     "ts": 3605061557614, "dur": 2,\n'
    b'    "args": {\n      "External id": 11,\n      "queued": 0, "device": 0\n    }\n  }',
    b'{\n    "args": {\n      "External id": 12,\n      "cbid": 211, "correlation": 12\n    },\n'
    b'    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4515, "tid": 4515, "ts": 1, "dur": 6\n  }',
    b'{\n    "ph": "X"\n  }',
    b'{\n  }',
)


def _repeated(events: list[bytes]) -> bytes:
    return b"[\n  " + b",\n  ".join(events) + b"\n]"


_REPEATED = _repeated(
    [_SHAPES[i % len(_SHAPES)] % {b"i": i} for i in range(60)]
    + [m for i in range(3) for m in _NEAR_MISSES]
    + [_SHAPES[i % len(_SHAPES)] % {b"i": i} for i in range(60, 90)]
)
SCANNED["pretty-printed shapes, repeated, with near misses"] = _REPEATED
# far more shapes than the scanner remembers (its 512 states used up: the rest read the long way)
SCANNED["more shapes than remembered"] = _repeated(
    [
        b'{"ph": "X", %s, "cat": "cpu_op", "ts": %d, "args": {"External id": %d}}'
        % (b", ".join(b'"u%d": %d' % ((i * 7 + k * k) % 29, k) for k in range(i % 40 + 1)), i, i)
        for i in range(300)
    ]
)

#: chunks the scanner leaves to the msgspec path: it does not model them exactly
FALLBACK = {
    "int above int64": b'[{"ph":"X","pid":9223372036854775808,"ts":1}]',
    "int of 20 digits": b'[{"ph":"X","pid":99999999999999999999,"ts":1}]',
    "float pid": b'[{"ph":"X","pid":1.5,"ts":1}]',
    "bool field": b'[{"ph":"X","ts":true}]',
    "string ts": b'[{"ph":"X","ts":"12"}]',
    "numeric name": b'[{"ph":"X","name":5,"ts":1}]',
    "duplicate key": b'[{"ph":"X","ph":"X","ts":1}]',
    "duplicate arg": b'[{"ph":"X","cat":"kernel","ts":1,"args":{"device":1,"device":2}}]',
    "float in an int arg": b'[{"ph":"X","cat":"kernel","ts":1,"args":{"correlation":1.5}}]',
    "NaN": b'[{"ph":"X","ts":NaN}]',
    "Infinity in an unknown key": b'[{"ph":"X","ts":1,"x":-Infinity}]',
    "lone surrogate": rb'[{"ph":"X","name":"\ud800","ts":1}]',
    "invalid utf8": b'[{"ph":"X","name":"\xff\xfe","ts":1}]',
    "overlong utf8": b'[{"ph":"X","name":"\xc0\xaf","ts":1}]',
    "not an object": b'[{"ph":"X","ts":1},5]',
    "args not an object": b'[{"ph":"X","cat":"kernel","ts":1,"args":[1]}]',
    "four dims": b'[{"ph":"X","cat":"kernel","ts":1,"args":{"grid":[1,1,1,1]}}]',
    "escaped key": rb'[{"p\u0068":"X","ts":1}]',
    "unicode category": '[{"ph":"X","cat":"\u212aernel","ts":1}]'.encode(),
    "duplicate key where a remembered key was": _repeated(
        [_SHAPES[2] % {b"i": i} for i in range(4)] + [_SHAPES[2].replace(b'"dur": 6', b'"ts": 6') % {b"i": 5}]
    ),
    "escaped key where a remembered key was": _repeated(
        [_SHAPES[3] % {b"i": i} for i in range(4)] + [_SHAPES[3].replace(b'"pid"', rb'"p\u0069d"') % {b"i": 5}]
    ),
}

#: not JSON at all: both paths raise ValueError
INVALID = {
    "truncated event": b'[{"ph":"X","ts":1',
    "truncated string": b'[{"ph":"X","name":"abc',
    "missing comma": b'[{"ph":"X"} {"ph":"X"}]',
    "trailing comma": b'[{"ph":"X"},]',
    "bad escape": rb'[{"ph":"X","name":"\q"}]',
    "bad number": b'[{"ph":"X","ts":1.}]',
    "leading zero": b'[{"ph":"X","ts":01}]',
    "control character": b'[{"ph":"X","name":"a\x01b"}]',
    "garbage after": b'[{"ph":"X"}] x',
    "high byte after digits": b'[{"ph":"X","ts":1234567\xfb9}]',
    "missing colon where a remembered key was": _repeated(
        [_SHAPES[1] % {b"i": i} for i in range(4)] + [_SHAPES[1].replace(b'"pid": 0', b'"pid" 0') % {b"i": 5}]
    ),
    "missing comma where a remembered key was": _repeated(
        [_SHAPES[1] % {b"i": i} for i in range(4)] + [_SHAPES[1].replace(b'"pid": 0,', b'"pid": 0') % {b"i": 5}]
    ),
}


@needs_native
@pytest.mark.parametrize("chunk", list(SCANNED.values()), ids=list(SCANNED))
def test_scanner_gives_the_msgspec_columns(chunk: bytes) -> None:
    frame = kineto_scanner.scan_columns(NATIVE, chunk)
    assert frame is not None, "the scanner left a chunk it models to the fallback"
    assert_frame_equal(frame, _msgspec_frame(chunk))
    _check_category_codes(chunk, frame)


def _check_category_codes(chunk: bytes, frame: pl.DataFrame) -> bool:
    """The scanner's category codes of ``chunk`` (``scan(..., categories)``), where it gives
    them, are exactly the enum cast the cut makes of ``frame``'s categories otherwise; and
    the scan is the same with them.  Whether it gave them."""
    scanned = NATIVE.scan(chunk, None, kineto_fields.COMMON_CATEGORY_NAMES)
    assert scanned is not None
    assert len(scanned) == 4
    if scanned[2] or scanned[3] is None:  # (events left to msgspec: the codes are not used)
        return False
    assert_frame_equal(kineto_scanner.scanned_frame(scanned[:3], chunk), frame)
    codes = pl.Series(scanned[3])
    expected = frame.get_column("cat").cast(kineto_fields.COMMON_CATEGORIES, strict=False).to_physical()
    assert codes.dtype == pl.UInt8  # (used as they are: they only index the kinds)
    assert codes.cast(expected.dtype).to_list() == expected.to_list()
    assert codes.null_count() == frame.get_column("cat").null_count()
    return True


@needs_native
def test_scanner_codes_the_common_categories() -> None:
    events = [
        b'{"ph":"X","cat":"kernel","name":"k","ts":1}', b'{"ph":"X","cat":"cpu_op","name":"o","ts":2}',
        b'{"ph":"i","name":"i","ts":3}', b'{"ph":"s","cat":"ac2g","id":4,"ts":3}', b'{"ph":"X","cat":null,"ts":4}',
        b'{"ph":"f","cat":"async_cpu_to_gpu","id":4,"ts":5}', b'{"ph":"X","cat":"cpu_op","ts":6}',
    ]
    chunk = b"[" + b",".join(events) + b"]"
    frame = kineto_scanner.scan_columns(NATIVE, chunk)
    assert frame is not None
    assert _check_category_codes(chunk, frame)
    # every category of the enum, each by its position
    every = b"[" + b",".join(b'{"ph":"X","cat":"%s","ts":1}' % c.encode() for c in kineto_fields.COMMON_CATEGORY_NAMES) + b"]"
    assert pl.Series(NATIVE.scan(every, None, kineto_fields.COMMON_CATEGORY_NAMES)[3]).to_list() == list(
        range(len(kineto_fields.COMMON_CATEGORY_NAMES))
    )
    # a category that is none of them as bytes (another one, another case, written with an
    # escape, empty, one space more), or a chunk with an event left to msgspec: no codes for
    # the chunk, the cut casts the texts itself
    for old, other in (
        (b'"kernel"', b'"trace"'), (b'"kernel"', b'"Kernel"'), (b'"ac2g"', b'"ac\\u0032g"'), (b'"kernel"', b'""'),
        (b'"kernel"', b'"kernel "'), (b'"kernel"', b'"kern\\u0065l"'),  # (the last: an event left to msgspec)
    ):
        changed = chunk.replace(old, other)
        scanned = NATIVE.scan(changed, None, kineto_fields.COMMON_CATEGORY_NAMES)
        assert scanned is not None
        assert scanned[3] is None, other
        assert_frame_equal(kineto_scanner.scanned_frame(scanned[:3], changed), _msgspec_frame(changed))
    # no category in the chunk: none either; and without categories, the three items as ever
    assert NATIVE.scan(b'[{"ph":"i","ts":1}]', None, kineto_fields.COMMON_CATEGORY_NAMES)[3] is None
    assert len(NATIVE.scan(chunk)) == 3
    for bad, error in (
        (["kernel"], TypeError), ((), ValueError), (("x" * 65,), ValueError), ((1,), TypeError),
        (("c",) * 251, ValueError),
    ):
        with pytest.raises(error):
            NATIVE.scan(chunk, None, bad)


@needs_native
def test_the_cut_is_the_same_with_and_without_the_scanners_category_codes() -> None:
    chunk = b"[" + b",".join(
        b'{"ph":"X","cat":"%s","name":"n%d","pid":1,"tid":%d,"ts":%d,"dur":3,"args":{"correlation":%d}}'
        % (cat, i % 7, i % 3, i, i)
        for i, cat in enumerate([b"kernel", b"cuda_runtime", b"cpu_op", b"gpu_memcpy", b"cuda_sync"] * 20)
    ) + b"]"
    scanned = NATIVE.scan(chunk, None, kineto_fields.COMMON_CATEGORY_NAMES)
    assert scanned[3] is not None
    parts = []
    for codes in (None, pl.Series(scanned[3])):
        cut = kineto_parts.Parts()
        cut.add(kineto_scanner.scanned_frame(kineto_scanner.scan(NATIVE, chunk), chunk), codes)
        parts.append(cut)
    # (a part's names are indices into its chunk's distinct names, whose order is arbitrary)
    timed = [cut.timed[0].with_columns(cut.names[0].gather(cut.timed[0].get_column("name"))) for cut in parts]
    assert_frame_equal(timed[0], timed[1])
    assert_frame_equal(parts[0].flows[0], parts[1].flows[0])
    assert_frame_equal(parts[0].launchers[0], parts[1].launchers[0])


_NEIGHBOURS = (
    b'{"ph":"X","cat":"kernel","name":"k","pid":1,"tid":7,"ts":10,"dur":2,"args":{"correlation":3,"grid":[2,1,1]}}',
    b'{"ph":"X","cat":"cpu_op","name":"op","pid":1,"tid":2,"ts":9.5,"dur":4,"args":{"External id":3}}',
)


def _with_neighbours(chunk: bytes) -> bytes:
    """The unusual events between ordinary ones (the scanner decodes those itself)."""
    return b"[" + _NEIGHBOURS[0] + b"," + chunk[1:-1] + b"," + _NEIGHBOURS[1] + b"]"


@needs_native
@pytest.mark.parametrize("chunk", list(FALLBACK.values()), ids=list(FALLBACK))
@pytest.mark.parametrize("neighbours", [False, True], ids=["alone", "between ordinary events"])
def test_unusual_events_go_through_msgspec(chunk: bytes, neighbours: bool) -> None:
    """An event the scanner does not model is decoded by msgspec (per event, or the whole
    chunk when msgspec refuses it): the frame is the msgspec path's either way."""
    if neighbours:
        chunk = _with_neighbours(chunk)
    try:
        expected = _msgspec_frame(chunk)
    except ValueError:  # the msgspec path refuses the chunk: the scanner must not give a frame
        assert kineto_scanner.scan_columns(NATIVE, chunk) is None
        return
    frame = kineto_scanner.scan_columns(NATIVE, chunk)
    if frame is not None:
        assert_frame_equal(frame, expected)


@needs_native
@pytest.mark.parametrize(
    "name", ["int above int64", "float pid", "string ts", "numeric name", "duplicate key", "float in an int arg"]
)
def test_fallback_is_per_event(name: str) -> None:
    """msgspec decodes only the unusual event; the scanner keeps the others."""
    scanned = NATIVE.scan(_with_neighbours(FALLBACK[name]))
    assert scanned
    rows, _columns, fallback = scanned
    assert rows == 2
    assert [index for _, _, index in fallback] == [1]


@needs_native
def test_a_float_time_among_fallback_events_sends_native_times_through_float64() -> None:
    big = 2**53 + 1  # exact as an int, rounded as a float64: shows which branch ran
    chunk = b'[{"ph":"X","ts":%d},{"ph":"X","pid":1.5,"ts":2.5}]' % big
    frame = kineto_scanner.scan_columns(NATIVE, chunk)
    assert frame is not None
    assert_frame_equal(frame, _msgspec_frame(chunk))
    chunk = b'[{"ph":"X","ts":2.5},{"ph":"X","pid":1.5,"ts":%d}]' % big
    frame = kineto_scanner.scan_columns(NATIVE, chunk)
    assert frame is not None
    assert_frame_equal(frame, _msgspec_frame(chunk))
    # no native row has a dur (the scanner leaves that column out), a fallback event's is a float
    chunk = b'[{"ph":"X","ts":1},{"ph":"X","pid":1.5,"ts":2,"dur":0.5}]'
    frame = kineto_scanner.scan_columns(NATIVE, chunk)
    assert frame is not None
    assert_frame_equal(frame, _msgspec_frame(chunk))


@needs_native
def test_integer_times_come_in_nanoseconds_unless_msgspec_decodes_some_events() -> None:
    """A time column of integers alone is handed over in ns (kind 7), multiplied as polars
    would, wrapping past int64; a float in it, or an event left to msgspec, keeps the µs
    column (kind 2) for the frame's fix.  Either way the frame is the msgspec path's."""

    def times(chunk: bytes) -> dict[str, tuple[int, list[int | float | None]]]:
        scanned = NATIVE.scan(chunk)
        assert scanned
        return {
            name: (kind, pl.Series(values).to_list())
            for name, kind, _, _, values, _ in scanned[1]
            if name in ("ts", "dur") and values is not None
        }

    wrapping = b'[{"ph":"X","ts":9223372036854776,"dur":3},{"ph":"X","ts":-5}]'
    assert times(wrapping) == {"ts": (7, [-9223372036854775616, -5000]), "dur": (7, [3000, None])}
    assert times(b'[{"ph":"X","ts":1,"dur":2.5}]') == {"ts": (7, [1000]), "dur": (2, [2.5])}
    assert times(b'[{"ph":"X","ts":1,"dur":2},{"ph":"X","pid":1.5,"ts":3}]') == {"ts": (2, [1]), "dur": (2, [2])}
    for chunk in (wrapping, b'[{"ph":"X","ts":1,"dur":2},{"ph":"X","pid":1.5,"ts":3}]'):
        frame = kineto_scanner.scan_columns(NATIVE, chunk)
        assert frame is not None
        assert_frame_equal(frame, _msgspec_frame(chunk))


@needs_native
@pytest.mark.parametrize("chunk", list(INVALID.values()), ids=list(INVALID))
def test_invalid_json_is_refused_like_the_msgspec_path(chunk: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the chunker's contract is a bare ValueError
        _msgspec_frame(chunk)
    with pytest.raises(ValueError):  # noqa: PT011
        kineto_scanner.scan_columns(NATIVE, chunk)


@needs_native
def test_every_truncation_of_a_chunk_is_refused_or_exact() -> None:
    chunk = SCANNED["unknown keys of any size"] + b""
    for end in range(len(chunk)):
        part = chunk[:end]
        try:
            frame = kineto_scanner.scan_columns(NATIVE, part)
        except ValueError:
            continue
        if frame is not None:
            assert_frame_equal(frame, _msgspec_frame(part))


@needs_native
def test_read_kineto_uses_the_native_scanner(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("TRACEKIT_PURE_PYTHON", raising=False)  # a suite run with the fallback forced
    trace = tmp_path / "t.json"
    trace.write_bytes(b'{"traceEvents":[' + SCANNED["grid and block"][1:-1] + b"]}")
    calls = []
    real = kineto_scanner.scan

    def spy(native, chunk, pool=None, categories=None):  # type: ignore[no-untyped-def]
        assert isinstance(pool, NATIVE.Pool)  # one per parse, its freed column memory reused
        assert categories == kineto_fields.COMMON_CATEGORY_NAMES  # coded by the scanner
        scanned = real(native, chunk, pool, categories)
        calls.append(scanned is not None)
        return scanned

    monkeypatch.setattr(kineto, "scan", spy)
    native = kineto.read_kineto(trace)
    assert calls
    assert all(calls)
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    assert kineto.native_scanner() is None
    calls.clear()
    pure = kineto.read_kineto(trace)
    assert not calls
    assert_frame_equal(native.events, pure.events)


@needs_native
def test_pooled_memory_gives_the_same_columns() -> None:
    # chunks of a few MB, so that their columns take mapped blocks (where the build maps them):
    # a dense chunk's blocks, written all over, are freed into the pool, then a sparse chunk
    # (mostly nulls: zeros never written) reuses them and must read exactly as unpooled
    dense = b"[" + b",".join(
        b'{"ph":"X","cat":"kernel","name":"kernel_number_%d_with_a_long_name","pid":%d,"tid":%d,"ts":%d,"dur":%d,'
        b'"args":{"stream":%d,"correlation":%d,"grid":[%d,1,1],"device":0}}' % (k, k, k, 10 * k, k, k, k, k)
        for k in range(20000)
    ) + b"]"
    sparse = b"[" + b",".join(
        b'{"ph":"i","ts":%d}' % k if k % 3 else b'{"ph":"X","cat":"cpu_op","name":"op%d","ts":%d}' % (k, k)
        for k in range(120000)
    ) + b"]"
    pool = NATIVE.Pool()
    frame = kineto_scanner.scanned_frame(kineto_scanner.scan(NATIVE, dense, pool), dense)
    assert frame is not None
    assert frame.height == 20000
    del frame  # its blocks go back to the pool
    for chunk in (sparse, dense, sparse):
        pooled = kineto_scanner.scanned_frame(kineto_scanner.scan(NATIVE, chunk, pool), chunk)
        plain = kineto_scanner.scanned_frame(kineto_scanner.scan(NATIVE, chunk), chunk)
        assert pooled is not None
        assert plain is not None
        assert_frame_equal(pooled, plain)
        assert_frame_equal(pooled, _msgspec_frame(chunk))
        del pooled, plain
    stats = pool.stats()
    assert stats["free"] <= 96
    if stats["mapped"]:  # a mapped build: the later chunks took the blocks freed before them
        assert stats["reused"] > 0
    kept = kineto_scanner.scanned_frame(kineto_scanner.scan(NATIVE, dense, pool), dense)
    del pool  # the blocks it kept free are unmapped; the ones still out, when released
    assert kept is not None
    assert_frame_equal(kept, _msgspec_frame(dense))
    del kept
    with pytest.raises(TypeError, match="pool"):
        NATIVE.scan(b"[]", object())
    with pytest.raises(TypeError):
        NATIVE.Pool(1)


def test_pure_python_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    assert kineto.native_scanner() is None
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "0")
    assert kineto.native_scanner() is NATIVE


_TOKENS = (
    b"NaN", b"1e400", b"-0", b"1.5", b"9223372036854775808", b'"\\ud800"', b'"\\u00e9"', b"true", b"null", b"[]",
    b"{}", b'"  12 "', b"\xff", b"\xc3\xa9", b"1e5", b"0.1234567890123456789", b",", b"}", b"]", b'"ts":1.5,',
    b'"args":{"device":"3"},', b'"pid":"Spans",', b'"ph":"X",',
)


def _damage(
    rng: random.Random, ev: bytearray, tokens: Sequence[bytes], *, delete_below: float, longest_cut: int,
    byte_range: tuple[int, int],
) -> None:
    """One random damage to ``ev`` in place: a token inserted (half the time), up to
    ``longest_cut`` bytes cut (up to ``delete_below``), else a byte replaced by one of
    ``byte_range``."""
    pos = rng.randrange(len(ev) + 1)
    op = rng.random()
    if op < 0.5:
        ev[pos:pos] = rng.choice(tokens)
    elif op < delete_below:
        del ev[pos : pos + rng.randint(1, longest_cut)]
    elif ev:
        ev[min(pos, len(ev) - 1)] = rng.randrange(*byte_range)


def _differential(chunk: bytes) -> str:
    """The scanner's and the msgspec path's readings of ``chunk`` compared: "equal" (the same
    frame), "fallback" (the scanner left the chunk to msgspec) or "refused" (both say it is
    not JSON); anything else fails the test."""
    try:
        expected = _msgspec_frame(chunk)
    except ValueError:
        expected = None
    try:
        frame = kineto_scanner.scan_columns(NATIVE, chunk)
    except ValueError:
        assert expected is None, chunk
        return "refused"
    if frame is None:
        return "fallback"
    assert expected is not None, chunk
    assert_frame_equal(frame, expected)
    _check_category_codes(chunk, frame)
    return "equal"


@needs_native
def test_mutated_chunks_agree_with_the_msgspec_path() -> None:
    """Differential check on randomly damaged chunks (seeded): the scanner gives the msgspec
    path's frame, leaves the chunk to it, or refuses text that the msgspec path refuses."""
    import json

    corpus = [json.dumps(e).encode() for chunk in SCANNED.values() for e in json.loads(chunk)]
    rng = random.Random(17)
    outcomes = {"equal": 0, "fallback": 0, "refused": 0}
    for _ in range(300):
        events = [bytearray(rng.choice(corpus)) for _ in range(rng.randint(1, 5))]
        for _ in range(rng.randint(1, 3)):
            _damage(rng, rng.choice(events), _TOKENS, delete_below=0.75, longest_cut=4, byte_range=(0, 256))
        chunk = b"[" + b",".join(bytes(e) for e in events) + b"]"
        outcomes[_differential(chunk)] += 1
    assert all(outcomes.values()), outcomes  # every outcome was exercised


@needs_native
def test_mutated_repeated_events_agree_with_the_msgspec_path() -> None:
    """Differential check where the scanner's remembered member texts matter: runs of
    pretty-printed events of a few shapes (seeded), one or two of them damaged, so that a
    damaged text comes where a remembered one was; and runs cut anywhere."""
    rng = random.Random(26)
    tokens = (b",", b"}", b'"', b":", b" ", b"\n", b"\\", b"0", b"9", b".", b"e", b"-", b"x", b'"ts": 1, ', b"\xff")
    outcomes = {"equal": 0, "fallback": 0, "refused": 0}
    for case in range(160):
        events = [
            bytearray(rng.choice(_SHAPES + _NEAR_MISSES) % {b"i": rng.randrange(100)})
            for _ in range(rng.randint(3, 12))
        ]
        for _ in range(rng.randint(0, 2)):
            _damage(rng, rng.choice(events[1:]), tokens, delete_below=0.8, longest_cut=3, byte_range=(32, 127))
        chunk = _repeated([bytes(e) for e in events])
        if case % 4 == 0:
            chunk = chunk[: rng.randrange(1, len(chunk))]
        outcomes[_differential(chunk)] += 1
    assert all(outcomes.values()), outcomes  # every outcome was exercised
