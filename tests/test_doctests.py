"""The examples in the public API's docstrings run (from the repository root, on sample_traces/)."""

from __future__ import annotations

import doctest
import importlib

import pytest
from conftest import REPO

# Modules whose docstrings carry examples for the public API (read_trace, diagnose, read_job, the
# pipeline, analyze, diff, the what-if questions).
MODULES = [
    "tracekit.reading.trace", "tracekit.analysis.diagnose", "tracekit.reading.job", "tracekit.pipeline", "tracekit.api",
    "tracekit.analysis.whatif", "tracekit.progress", "tracekit.cli._progress",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0, f"{name} has no docstring examples"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name} (see the output above)"
