"""Shared fixtures: where the real traces live, and an isolated cache for every test."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
SAMPLE_TRACES = REPO / "sample_traces"


def shared_trace(relative: str) -> Path:
    """Path of a real trace under ../shared/traces, or skip the test when it is absent."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"real trace not available: ../shared/traces/{relative}")
    return path


def shared_kineto_traces() -> list[Path]:
    if not SHARED_TRACES.exists():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*.json*") if p.is_file())


def shared_trace_params(paths: list[Path], slow: set[str]) -> list[Any]:
    """``paths`` (under ../shared/traces) as parameters named by their path there; the ones
    named in ``slow`` are marked slow, for tests whose costliest traces run with -m slow."""
    params = []
    for path in paths:
        name = str(path.relative_to(SHARED_TRACES))
        params.append(pytest.param(path, id=name, marks=[pytest.mark.slow] if name in slow else []))
    return params


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(cache))
    return cache


def write_trace(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    """Write a small Kineto-style trace (object form); gzip when the name ends in .gz."""
    doc = {"schemaVersion": 1, **top, "traceEvents": events}
    data = json.dumps(doc).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path
