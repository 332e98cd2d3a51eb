"""The readers give the same canonical tables as the reader the digests were recorded with.

``tests/data/parse_digests.json`` holds, for every Kineto and Nsight file under
``../shared/traces``, ``sample_traces`` and ``tests/data``, a digest of each table written
by the reader before the native decoding (``scripts/parse_digests.py --write``).  A
reader change that alters one value, one dtype or one warning fails here with the file
and table named.
"""

from __future__ import annotations

import json

import parse_digests
import pytest

_RECORDED = json.loads(parse_digests.DIGESTS.read_text())
_FILES = dict(parse_digests.trace_files())


def _params() -> list[object]:
    out = []
    for key in sorted(_RECORDED):
        marks = [pytest.mark.shared] if key.startswith("shared/") else []
        out.append(pytest.param(key, marks=marks, id=key))
    return out


@pytest.mark.parametrize("key", _params())
def test_tables_match_recorded_digest(key: str) -> None:
    path = _FILES.get(key)
    if path is None:
        if key.startswith("shared/"):
            pytest.skip(f"real trace not available: ../{key}")
        pytest.fail(f"{key} has a recorded digest but is missing from the repository")
    diff = parse_digests.differences(_RECORDED[key], parse_digests.file_digest(path))
    assert not diff, f"{key}: " + "; ".join(diff)


def _sqlite_params() -> list[object]:
    return [p for p in _params() if getattr(p, "id", "").endswith(".sqlite")]


@pytest.mark.parametrize("key", _sqlite_params())
def test_nsight_sqlite3_fallback_matches_recorded_digest(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Nsight reader's sqlite3 path (used without adbc-driver-sqlite, and per query when
    an Arrow read is not exact) gives the same tables as the Arrow path."""
    path = _FILES.get(key)
    if path is None:
        pytest.skip(f"trace not available: {key}")
    monkeypatch.setenv("TRACEKIT_NSIGHT_ARROW", "0")
    diff = parse_digests.differences(_RECORDED[key], parse_digests.file_digest(path))
    assert not diff, f"{key}: " + "; ".join(diff)


def test_every_repository_trace_has_a_digest() -> None:
    """A new trace in the repository gets a digest too (run scripts/parse_digests.py --write)."""
    missing = [key for key in _FILES if key not in _RECORDED and not key.startswith("shared/")]
    assert not missing, missing


def test_a_changed_table_is_reported() -> None:
    key = next(k for k, v in sorted(_RECORDED.items()) if k.startswith("sample_traces/") and "tables" in v)
    actual = parse_digests.file_digest(_FILES[key])
    actual["tables"]["events"] = {**actual["tables"]["events"], "sha256": "0" * 64}
    actual["info"] = {**actual["info"], "truncated": not actual["info"]["truncated"]}
    diff = parse_digests.differences(_RECORDED[key], actual)
    assert any(line.startswith("table events sha256") for line in diff)
    assert any(line.startswith("info:") for line in diff)
