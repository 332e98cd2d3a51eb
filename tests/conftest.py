"""Shared fixtures: where the real traces live, and an isolated cache for every test."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tracekit.progress import ProgressState

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


def jobs_folder(root: Path) -> Path:
    """A folder of three jobs (in ``root/archive``): two single traces and the two ranks of one job."""
    folder = root / "archive"
    folder.mkdir()
    for name in ("dataloader_stall.kineto.json", "host_sync.kineto.json", "multi_rank.rank0.kineto.json", "multi_rank.rank1.kineto.json"):
        shutil.copy(SAMPLE_TRACES / "synthetic" / name, folder / name)
    return folder


class ProgressRecorder:
    """An ``on_update`` for a :class:`tracekit.progress.Progress` that keeps every state it hears."""

    def __init__(self) -> None:
        self.states: list[ProgressState] = []

    def __call__(self, s: ProgressState) -> None:
        self.states.append(s)

    def phases(self) -> list[str]:
        """The phases in order, without the one a Progress starts in (until its first phase)."""
        out: list[str] = []
        for s in self.states:
            if s.phase != "starting" and (not out or out[-1] != s.phase):
                out.append(s.phase)
        return out

    def bytes_in(self, phase: str) -> tuple[int, int | None]:
        """(done, total) bytes when ``phase`` was last heard of."""
        last = [s for s in self.states if s.phase == phase][-1]
        return last.done, last.total
