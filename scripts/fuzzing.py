"""Mutations of valid traces, for fuzzing the parsers and the analysis end to end.

Used by ``tests/test_fuzz.py`` (a few hundred cases in the normal suite) and
``scripts/fuzz_parsers.py`` (thousands, with counts written to docs/fuzzing.md).  Every
mutation is a pure function of a seed, so a failing case can be replayed exactly.

The contract under test: for any input, tracekit returns tables (possibly partial, with
warnings) or raises a :class:`~tracekit.errors.TracekitError` — never another exception,
never a hang.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzz import hostile

#: values that have broken trace readers before
HOSTILE_VALUES: list[Any] = [
    None, "", "NaN", "1e400", -1, -(2**63), 2**63, 2**64 + 7, 10**30, 1.5e308, -0.0, True, [], {}, [1, [2, [3]]],
    {"a": {"b": {"c": {}}}}, "\u00ff\u2603", "stream 7", "0x10", 3.25, "12", "-5",
]

_HOSTILE: dict[str, Callable[[str, random.Random], bytes]] = {
    "very_deep": hostile.deep_nesting, "huge_values": hostile.huge_values,
    "edge_numbers": hostile.edge_numbers, "bad_text": hostile.bad_text,
}

KINETO_MUTATIONS = (
    "truncate", "bitflip", "wrong_type", "drop_key", "duplicate_key", "nan_literal", "shuffle", "overlap",
    "negative_dur", "unknown_category", "deep_nesting", "invalid_utf8", "empty_events", "huge_int", "garbage_tail",
    # structure-aware (fuzz/hostile.py): past every recursion limit, megabyte values, number
    # edges, overlong UTF-8 and lone surrogates
    "very_deep", "huge_values", "edge_numbers", "bad_text",
)


def kineto_mutation(doc: dict[str, Any], raw: bytes, rng: random.Random, kind: str) -> bytes:
    """One mutated variant of a Kineto trace (``doc`` is its decoded form, ``raw`` its bytes)."""
    events: list[dict[str, Any]] = copy.deepcopy(doc["traceEvents"])
    top = {k: v for k, v in doc.items() if k != "traceEvents"}

    def dump(evs: list[Any], **extra: Any) -> bytes:
        return json.dumps({**top, **extra, "traceEvents": evs}).encode()

    if kind == "truncate":
        return raw[: rng.randrange(0, max(1, len(raw)))]
    if kind == "bitflip":
        data = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        return bytes(data)
    if kind == "garbage_tail":
        return raw + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    if kind == "empty_events":
        return dump([])
    if kind in _HOSTILE:
        return _HOSTILE[kind](dump(events).decode(), rng)
    if not events:
        return raw
    victims = rng.sample(range(len(events)), k=min(len(events), rng.randint(1, 5)))
    for i in victims:
        ev = events[i]
        keys = [*ev.keys(), *(f"args.{k}" for k in (ev.get("args") or {}))]
        if not keys:
            continue
        key = rng.choice(keys)
        target, name = (ev["args"], key[5:]) if key.startswith("args.") else (ev, key)
        if kind == "wrong_type":
            target[name] = rng.choice(HOSTILE_VALUES)
        elif kind == "drop_key":
            target.pop(name, None)
        elif kind == "negative_dur":
            ev["dur"] = -abs(ev.get("dur", 1) if isinstance(ev.get("dur"), (int, float)) else 1) - 1
        elif kind == "unknown_category":
            ev["cat"] = rng.choice(["mystery", "Kernel ", "KERNEL", "gpu_memcpy2", "", 7])
        elif kind == "huge_int":
            target[name] = rng.choice([2**63, 2**64 - 1, 10**25, -(2**70)])
        elif kind == "deep_nesting":
            nested: Any = 1
            for _ in range(rng.randint(50, 400)):
                nested = [nested]
            ev.setdefault("args", {})["Input Dims"] = nested
        elif kind == "overlap":
            other = events[rng.randrange(len(events))]
            for k in ("pid", "tid", "ts"):
                if k in other:
                    ev[k] = other[k]
    if kind == "shuffle":
        rng.shuffle(events)
    if kind == "nan_literal":
        text = dump(events).decode()
        return text.replace('"dur": ', '"dur": NaN, "x": ', 1).replace('"ts": ', '"ts": Infinity, "y": ', 1).encode()
    if kind == "duplicate_key":
        text = dump(events).decode()
        return text.replace('"ph": "X"', '"ph": "X", "ph": "i"', 3).encode()
    if kind == "invalid_utf8":
        data = dump(events)
        at = data.find(b'"name": "') + 9
        return data[:at] + b"\xff\xfe\xc3" + data[at:] if at > 8 else data + b"\xff"
    return dump(events)


def write_variant(data: bytes, path: Path, rng: random.Random) -> Path:
    """Write plain or gzip-compressed (half the time), as a user's file would be."""
    if rng.random() < 0.5:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path


SQLITE_MUTATIONS = (
    "truncate_file", "bitflip_file", "drop_table", "drop_column", "wrong_types", "null_column", "empty_table",
    *hostile.NSIGHT_SCHEMAS,  # views (one of endless rows), triggers, megabyte blobs, wide tables
)


def sqlite_mutation(src: Path, dst: Path, rng: random.Random, kind: str) -> Path:
    """A mutated copy of an Nsight SQLite export at ``dst`` (the source is never touched)."""
    if kind in hostile.NSIGHT_SCHEMAS:
        return hostile.hostile_schema(src, dst, rng, kind)
    raw = src.read_bytes()
    if kind == "truncate_file":
        dst.write_bytes(raw[: rng.randrange(0, len(raw))])
        return dst
    if kind == "bitflip_file":
        data = bytearray(raw)
        for _ in range(rng.randint(1, 16)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        dst.write_bytes(bytes(data))
        return dst
    dst.write_bytes(raw)
    con = sqlite3.connect(dst)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        if not tables:
            return dst
        table = rng.choice(tables)
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        if kind == "drop_table":
            con.execute(f'DROP TABLE "{table}"')
        elif kind == "drop_column" and len(cols) > 1:
            con.execute(f'ALTER TABLE "{table}" DROP COLUMN "{rng.choice(cols)}"')
        elif kind in ("wrong_types", "null_column") and cols:
            col = rng.choice(cols)
            value = None if kind == "null_column" else rng.choice(["text", -1, 2**62, 3.5, b"\x00\xff"])
            con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE rowid % ? = 0', (value, rng.randint(1, 5)))
        elif kind == "empty_table":
            con.execute(f'DELETE FROM "{table}"')
        con.commit()
    except sqlite3.Error:
        pass
    finally:
        con.close()
    return dst


def run_case(fn: Callable[[], Any]) -> str:
    """Run one case; return "ok", "refused" (a TracekitError) or raise anything else."""
    from tracekit.errors import TracekitError

    try:
        fn()
    except TracekitError:
        return "refused"
    return "ok"
