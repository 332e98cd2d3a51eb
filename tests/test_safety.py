"""Safety properties: bounded decompression, a cache that survives deletion and concurrent
writers, no code execution from trace content, results independent of event order."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import random
import re
import shutil
from pathlib import Path

import pytest
from conftest import REPO, SAMPLE_TRACES

import tracekit
from tracekit import cache as tk_cache
from tracekit.analysis import diagnose
from tracekit.errors import TraceTooLargeError
from tracekit.parsers import parse
from tracekit.report import to_json_dict


def test_gzip_bomb_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [' + b" " * (64 * 1024 * 1024))
    assert path.stat().st_size < 200_000
    monkeypatch.setenv("TRACEKIT_MAX_BYTES", str(8 * 1024 * 1024))
    with pytest.raises(TraceTooLargeError, match="gzip bomb") as info:
        parse(path)
    assert "TRACEKIT_MAX_BYTES" in info.value.render()


def _read_in_child(path: str, cache_dir: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    import os

    os.environ["TRACEKIT_CACHE_DIR"] = cache_dir
    import tracekit as tk

    out.put(tk.read_trace(path).events.height)


def test_concurrent_readers_share_one_cache_safely(tmp_path: Path) -> None:
    src = SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json"
    path = tmp_path / "t.json"
    shutil.copy(src, path)
    cache_dir = tmp_path / "cache"
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_read_in_child, args=(str(path), str(cache_dir), out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    heights = {out.get(timeout=5) for _ in procs}
    expected = parse(path).events.height
    assert heights == {expected}
    entries = list((cache_dir / "traces").glob("*/*"))
    assert len(entries) == 1
    assert not entries[0].name.startswith(".tmp")
    # the cache can be deleted at any time and is rebuilt
    shutil.rmtree(cache_dir)
    assert tracekit.read_trace(path).events.height == expected


def test_cache_entry_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash while writing leaves no entry that a later read would trust."""
    path = tmp_path / "t.json"
    shutil.copy(SAMPLE_TRACES / "synthetic" / "healthy.kineto.json", path)
    tables = parse(path)
    key = tk_cache.content_key(path)

    def crash(self: object, directory: object) -> None:
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(type(tables), "write_parquet", crash)
        assert tk_cache.store(key, tables) is False
    assert tk_cache.load(key, path) is None
    assert not list((tk_cache.cache_dir() / "traces").rglob("events.parquet"))


def test_no_code_execution_from_trace_content() -> None:
    """Nothing read from a trace is unpickled, eval'd or exec'd."""
    pattern = re.compile(r"\b(pickle|marshal|shelve)\b|(?<![\w.])(eval|exec)\(|yaml\.load\(")
    offenders = []
    for root in ("tracekit", "parsers"):
        for path in (REPO / root).rglob("*.py"):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line) and not line.lstrip().startswith("#"):
                    offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []


def test_diagnosis_does_not_depend_on_event_order(tmp_path: Path) -> None:
    doc = json.loads((SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json").read_text())
    a = tmp_path / "a.json"
    a.write_text(json.dumps(doc))
    random.Random(3).shuffle(doc["traceEvents"])
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    ja = to_json_dict(diagnose(parse(a)))
    jb = to_json_dict(diagnose(parse(b)))
    ja["trace"]["path"] = jb["trace"]["path"] = ""
    assert ja == jb
