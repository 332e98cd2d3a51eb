"""Digest of every canonical table of every trace a reader change must not alter.

Reads each Kineto and Nsight file under ``../shared/traces``, ``sample_traces`` and
``tests/data`` (without the cache) and records, per file and table, the schema, the row
count and a SHA-256 of the rows written as NDJSON, plus the trace info that readers
fill in (truncation, warnings, start/end, rank).  ``--write`` stores the result in
``tests/data/parse_digests.json``; without it the script compares against that file and
lists every difference (exit status 1 when there is one).

    python scripts/parse_digests.py --write     # before a reader change
    python scripts/parse_digests.py             # after it

The threads table is digested as a set of rows (sorted on every column): its row order
is not a property of the trace.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DIGESTS = ROOT / "tests" / "data" / "parse_digests.json"
#: (prefix in the digest file, folder)
SOURCES = (
    ("shared/traces", ROOT.parent / "shared" / "traces"),
    ("sample_traces", ROOT / "sample_traces"),
    ("tests/data", ROOT / "tests" / "data"),
)
_SUFFIXES = (".json", ".json.gz", ".sqlite")
#: JSON files beside the traces that are not traces (expected results, capture metadata, the
#: loop simulator's fingerprints)
_NOT_TRACES = (".expected.json", "metadata.json", "hta_reference.json", "parse_digests.json", "loopsim_baseline.json")
#: tables whose row order carries no meaning
_AS_SET = frozenset({"threads"})


def trace_files() -> list[tuple[str, Path]]:
    """Every candidate trace file as (key, path), sorted by key; absent folders are skipped."""
    out = []
    for prefix, folder in SOURCES:
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*")):
            name = path.name.lower()
            if path.is_file() and name.endswith(_SUFFIXES) and not name.endswith(_NOT_TRACES):
                out.append((f"{prefix}/{path.relative_to(folder).as_posix()}", path))
    return sorted(out)


def table_digest(name: str, frame: Any) -> dict[str, Any]:
    """Schema, row count and a content hash of one table."""
    if name in _AS_SET and frame.height:
        frame = frame.sort(frame.columns, nulls_last=True)
    text = frame.write_ndjson().encode()
    return {
        "rows": frame.height,
        "schema": {c: str(t) for c, t in frame.schema.items()},
        "sha256": hashlib.sha256(text).hexdigest(),
    }


def file_digest(path: Path) -> dict[str, Any]:
    """The digest of one file's tables, or the error class and message a reader raised."""
    from tracekit.errors import TracekitError
    from tracekit.parsers import detect_format, parse
    from tracekit.schema import TABLE_NAMES

    try:
        fmt = detect_format(path)
        if fmt == "nsys-rep":
            return {"skipped": "nsys-rep (needs nsys)"}
        tables = parse(path, format=fmt)
    except TracekitError as exc:
        message = str(exc).replace(str(path), "<path>")
        return {"error": type(exc).__name__, "message": message}
    info = tables.info
    return {
        "format": info.format,
        "info": {
            "truncated": info.truncated,
            "warnings": list(info.warnings),
            "start_ns": info.start_ns,
            "end_ns": info.end_ns,
            "rank": info.rank,
            "world_size": info.world_size,
            "producer": info.producer,
        },
        "tables": {name: table_digest(name, tables.table(name)) for name in TABLE_NAMES},
    }


def compute(keys: set[str] | None = None) -> dict[str, Any]:
    return {key: file_digest(path) for key, path in trace_files() if keys is None or key in keys}


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Human-readable differences between two digests of the same file."""
    out = []
    for field in sorted(set(expected) | set(actual)):
        if field == "tables":
            continue
        if expected.get(field) != actual.get(field):
            out.append(f"{field}: {expected.get(field)!r} -> {actual.get(field)!r}")
    for name in sorted(set(expected.get("tables", {})) | set(actual.get("tables", {}))):
        want, got = expected.get("tables", {}).get(name), actual.get("tables", {}).get(name)
        if want == got:
            continue
        if want is None or got is None:
            out.append(f"table {name}: present {want is not None} -> {got is not None}")
            continue
        for part in ("rows", "schema", "sha256"):
            if want[part] != got[part]:
                out.append(f"table {name} {part}: {want[part]!r} -> {got[part]!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="record the digests instead of comparing")
    args = parser.parse_args(argv)
    actual = compute()
    if args.write:
        DIGESTS.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(actual)} digests to {DIGESTS.relative_to(ROOT)}")
        return 0
    expected = json.loads(DIGESTS.read_text())
    failures = 0
    for key in sorted(actual):
        if key not in expected:
            print(f"{key}: no recorded digest")
            continue
        diff = differences(expected[key], actual[key])
        failures += bool(diff)
        for line in diff:
            print(f"{key}: {line}")
    print(f"{len(actual)} files compared, {failures} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
