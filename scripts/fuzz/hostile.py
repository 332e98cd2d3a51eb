"""Structure-aware hostile inputs, beyond byte flips: what a malicious or badly broken trace
can hold that random mutation almost never reaches.  Every function is a pure function of
its arguments (and a seeded ``random.Random``), so a case replays exactly.

Used by the mutation fuzzer (scripts/fuzzing.py's kinds), by the regression tests
(tests/test_fuzz_hostile.py) and by hand (``python scripts/fuzz ...``).
"""

from __future__ import annotations

import gzip
import json
import random
import sqlite3
import zlib
from pathlib import Path
from typing import Any

#: integers and floats at every edge the readers convert through (as JSON text)
EDGE_NUMBERS = (
    "9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809",
    "18446744073709551615", "18446744073709551616", "1e308", "1.7976931348623157e308", "1e309", "-1e309",
    "5e-324", "2.2250738585072014e-308", "1e-400", "-0", "-0.0", "0e0", "1E+2", "9007199254740993",
    "4294967296", "2147483648", "-2147483649", "0.1e1", "123456789012345678901234567890.5",
)
#: byte sequences that are not valid UTF-8 (overlong forms, surrogates, cut sequences, out
#: of range) and JSON escapes of lone surrogates
BAD_TEXT = (
    b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80",
    b"\xff", b"\xfe\xff", b"\xc3", b"\xe2\x82", b"\x80", rb"\ud800", rb"\udfff", rb"\ud800\u0041", rb"\udc00\ud800",
)


def nested(depth: int, rng: random.Random | None = None) -> str:
    """A JSON value nested ``depth`` deep (arrays, objects or both)."""
    kind = rng.randrange(3) if rng is not None else 0
    if kind == 0:
        return "[" * depth + "1" + "]" * depth
    if kind == 1:
        return '{"a":' * depth + "1" + "}" * depth
    return '[{"a":' * (depth // 2) + "1" + "}]" * (depth // 2)


def kineto_text(events: list[dict[str, Any]], top: dict[str, Any]) -> str:
    return json.dumps({**top, "traceEvents": events})


def with_raw_value(text: str, key: str, raw: str, at: int = 0) -> str:
    """The trace text with ``"key": raw`` put first into the ``at``-th event that has args
    (the raw JSON text is not parsed here: it may be anything)."""
    start = -1
    for _ in range(at + 1):
        start = text.find('"args": {', start + 1)
        if start < 0:
            break
    if start < 0:  # no event with args: the first event gets them
        start = text.find('"traceEvents": [{') + len('"traceEvents": [')
        return text[: start + 1] + f'"args": {{"{key}": {raw}}}, ' + text[start + 1 :]
    cut = start + len('"args": {')
    return text[:cut] + f'"{key}": {raw}, ' + text[cut:]


def deep_nesting(text: str, rng: random.Random) -> bytes:
    """An args value nested far past every recursion limit (10,001 to 100,000 deep), or
    the same depth as a top-level key beside traceEvents."""
    depth = rng.randint(10_001, 100_000)
    if rng.random() < 0.25:
        return ('{"deep": ' + nested(depth, rng) + "," + text[1:]).encode()
    return with_raw_value(text, rng.choice(["Input Dims", "grid", "junk"]), nested(depth, rng), rng.randrange(3)).encode()


def huge_values(text: str, rng: random.Random) -> bytes:
    """A megabyte string (as a name, a category or an arg) or a megabyte number."""
    size = rng.randint(1 << 20, 3 << 20)
    if rng.random() < 0.5:
        value = '"' + rng.choice(["x", "é", "\\n", "\\u00e9", " "]) * (size // 6) + '"'
    else:
        value = rng.choice(["", "-"]) + "9" * size + rng.choice(["", ".5", "e3"])
    key = rng.choice(["name", "cat", "Input Dims", "External id", "ts"])
    if key in ("name", "cat", "ts"):
        return text.replace(f'"{key}": ', f'"{key}": {value}, "x_{key}": ', 1).encode()
    return with_raw_value(text, key, value, rng.randrange(3)).encode()


def edge_numbers(text: str, rng: random.Random) -> bytes:
    """Integer and float edges in the fields the readers convert (times, ids, args)."""
    for _ in range(rng.randint(1, 6)):
        key = rng.choice(["ts", "dur", "pid", "tid", "id"])
        text = text.replace(f'"{key}": ', f'"{key}": {rng.choice(EDGE_NUMBERS)}, "x": ', 1)
    return with_raw_value(text, rng.choice(["correlation", "External id", "stream", "device", "bytes"]), rng.choice(EDGE_NUMBERS)).encode()


def bad_text(text: str, rng: random.Random) -> bytes:
    """Invalid and overlong UTF-8 and lone surrogates inside names, keys and values."""
    data = text.encode()
    for _ in range(rng.randint(1, 4)):
        marks = [i for i in range(len(data)) if data[i : i + 1] == b'"'][:2000]
        if not marks:
            break
        at = rng.choice(marks) + 1
        data = data[:at] + rng.choice(BAD_TEXT) + data[at:]
    return data


def shared_ids(events: int, rng: random.Random, *, flows: bool) -> bytes:
    """``events`` events that all share one correlation id (or, with ``flows``, one flow id:
    every start and end of one flow), on one thread and one stream."""
    out = []
    for i in range(events):
        if flows:
            out.append({"ph": "s" if i % 2 == 0 else "f", "id": 7, "pid": 1, "tid": 1, "ts": i, "cat": "ac2g", "name": "ac2g", "bp": "e"})
        elif i % 2 == 0:
            out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": i, "dur": 1, "args": {"correlation": 7}})
        else:
            out.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 1, "args": {"correlation": 7, "stream": 7, "device": 0}})
    return json.dumps({"traceEvents": out}, separators=(",", ":")).encode()


def gzip_bomb(inflated: int) -> bytes:
    """A small gzip that inflates to ``inflated`` bytes: a valid trace start, then blanks
    inside the events array (valid JSON all the way, so only the size cap can stop it)."""
    head = b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1},'
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [comp.compress(head)]
    block = b" " * (1 << 20)
    left = inflated - len(head)
    while left > 0:
        parts.append(comp.compress(block[: min(left, len(block))]))
        left -= len(block)
    parts.append(comp.compress(b'{"ph": "X", "name": "b", "ts": 2, "dur": 1, "pid": 1, "tid": 1}]}'))
    parts.append(comp.flush())
    return b"".join(parts)


def lying_gzip(text: bytes, isize: int) -> bytes:
    """A gzip whose trailer states ``isize`` as the inflated size (mod 2**32), whatever it is."""
    raw = gzip.compress(text, mtime=0)
    return raw[:-4] + (isize % 2**32).to_bytes(4, "little")


NSIGHT_SCHEMAS = ("recursive_view", "view_for_table", "trigger", "huge_blob", "huge_text", "many_columns")


def hostile_schema(src: Path, dst: Path, rng: random.Random, kind: str) -> Path:
    """A copy of an Nsight export whose schema is hostile: a table replaced by a view (one
    of endless rows, or one that reads another table), triggers, megabyte blobs and texts,
    a table of many columns.  The reader opens exports read-only and never loads
    extensions, so none of it may run code, write, or hang."""
    dst.write_bytes(src.read_bytes())
    con = sqlite3.connect(dst)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        table = rng.choice(tables)
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        if kind in ("recursive_view", "view_for_table"):
            con.execute(f'ALTER TABLE "{table}" RENAME TO "{table}_old"')
            names = ", ".join(f'x AS "{c}"' for c in cols) or "x"
            if kind == "recursive_view":  # rows without end
                body = f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT {names} FROM c"
            else:
                body = f'SELECT * FROM "{table}_old" UNION ALL SELECT * FROM "{table}_old"'
            con.execute(f'CREATE VIEW "{table}" AS {body}')
        elif kind == "trigger":
            con.execute(f'CREATE TRIGGER t_ins AFTER INSERT ON "{table}" BEGIN DELETE FROM "{table}"; END')
            con.execute(f'CREATE TEMP TRIGGER IF NOT EXISTS t_none AFTER DELETE ON "{table}" BEGIN SELECT 1; END')
        elif kind in ("huge_blob", "huge_text") and cols:
            col = rng.choice(cols)
            value: Any = b"\0\xff" * (1 << 23) if kind == "huge_blob" else "é" * (1 << 22)
            con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE rowid IN (SELECT rowid FROM "{table}" LIMIT 2)', (value,))
        elif kind == "many_columns":
            con.execute(f'CREATE TABLE "wide" ({", ".join(f"c{i} INTEGER" for i in range(1500))})')
        con.commit()
    except sqlite3.Error:
        pass
    finally:
        con.close()
    return dst
