"""Fuzzing (a few hundred cases; scripts/fuzz_parsers.py runs thousands): any mutation of a
valid trace yields tables (maybe partial, with warnings) or a TracekitError — never another
exception, never a hang — and the analysis runs on whatever was salvaged."""

from __future__ import annotations

import json
import os
import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES
from fuzzing import KINETO_MUTATIONS, SQLITE_MUTATIONS, kineto_mutation, run_case, sqlite_mutation, write_variant

from tracekit.analysis import diagnose
from tracekit.parsers import parse

CASE_SECONDS = 20


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def fail(signum: int, frame: object) -> None:
        raise AssertionError(f"case did not finish in {seconds} s (hang)")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _small_kineto() -> tuple[dict[str, object], bytes]:
    doc = json.loads((SAMPLE_TRACES / "synthetic" / "host_sync.kineto.json").read_text())
    doc["traceEvents"] = doc["traceEvents"][:120]
    return doc, json.dumps(doc).encode()


@pytest.mark.parametrize("kind", KINETO_MUTATIONS)
def test_kineto_mutations(kind: str, tmp_path: Path) -> None:
    doc, raw = _small_kineto()
    outcomes = []
    for seed in range(12):
        rng = random.Random(f"{kind}-{seed}")
        path = write_variant(kineto_mutation(doc, raw, rng, kind), tmp_path / f"case{seed}.json", rng)

        def case(path: Path = path) -> None:
            tables = parse(path)
            tables.validate()
            diagnose(tables)

        with deadline(CASE_SECONDS):
            outcomes.append(run_case(case))
    assert set(outcomes) <= {"ok", "refused"}


@pytest.mark.parametrize("kind", SQLITE_MUTATIONS)
def test_nsight_mutations(kind: str, tmp_path: Path) -> None:
    src = SAMPLE_TRACES / "synthetic" / "host_sync.nsys.sqlite"
    for seed in range(8):
        rng = random.Random(f"{kind}-{seed}")
        path = sqlite_mutation(src, tmp_path / f"case{seed}.sqlite", rng, kind)

        def case(path: Path = path) -> None:
            tables = parse(path)
            tables.validate()
            diagnose(tables)

        with deadline(CASE_SECONDS):
            assert run_case(case) in {"ok", "refused"}


def test_the_campaign_shared_by_processes_runs_the_same_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    """``scripts/fuzz_parsers.py --jobs N`` splits each parser's cases over N processes: the
    same cases run, with the same outcomes, as in one process; the processes' one polars
    thread each is not left in this process' environment (its later children would inherit it)."""
    import fuzz_parsers

    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    one = fuzz_parsers.run(6, jobs=1)
    two = fuzz_parsers.run(6, jobs=2)
    assert "POLARS_MAX_THREADS" not in os.environ
    for parser in ("kineto", "nsight"):
        a, b = one[parser], two[parser]
        assert isinstance(a, dict)
        assert isinstance(b, dict)
        assert a["cases"] == b["cases"] == 6
        assert a["outcomes"] == b["outcomes"]
        assert a["by_mutation"] == b["by_mutation"]
    assert one["failures"] == two["failures"] == []
