"""Golden files: every report format rendered from a fixed synthetic trace equals the committed,
reviewed copy in tests/golden/.  After an intended change, regenerate them with
``python scripts/update_golden.py`` and review the diff."""

from __future__ import annotations

import json
import re

import pytest
import update_golden
from update_golden import CASES, GOLDEN, render, stale_diff

from tracekit._version import __version__


@pytest.mark.parametrize("name", sorted(CASES))
def test_report_matches_golden_file(name: str) -> None:
    path = GOLDEN / name
    assert path.exists(), f"missing golden file {path}; run python scripts/update_golden.py"
    expected = path.read_text(encoding="utf-8")
    actual = render(name)
    assert actual == expected, (
        f"{name} differs from the golden file (if the change is intended, run "
        f"`python scripts/update_golden.py` and review the diff):\n{stale_diff(name, expected, actual)}"
    )


def test_every_format_has_a_golden_file() -> None:
    covered = set()
    for argv in CASES.values():
        fmt = argv[argv.index("--format") + 1] if "--format" in argv else "text"
        covered.add((argv[0], fmt))
    assert covered >= {
        ("analyze", "text"), ("analyze", "json"), ("analyze", "markdown"), ("analyze", "html"),
        ("diff", "text"), ("diff", "json"), ("diff", "markdown"),
    }
    # no stray files that no case produces (they would never be checked)
    assert {p.name for p in GOLDEN.iterdir() if p.is_file()} == set(CASES)


def test_golden_files_do_not_depend_on_the_version() -> None:
    for name in CASES:
        text = (GOLDEN / name).read_text(encoding="utf-8")
        if not name.endswith(".txt"):  # the terminal text does not print the version
            assert "{VERSION}" in text, name
        assert f"tracekit {__version__}" not in text
        assert f'"tracekit_version": "{__version__}"' not in text
    assert update_golden.normalise(f"tracekit {__version__} ok") == "tracekit {VERSION} ok"


def test_golden_json_is_the_contract() -> None:
    report = json.loads((GOLDEN / "analyze_host_sync.json").read_text(encoding="utf-8"))
    assert report["schema"] == "tracekit.report/1"
    assert report["summary"]["top_finding"] == "host_device_sync"
    diff = json.loads((GOLDEN / "diff_dataloader.json").read_text(encoding="utf-8"))
    assert diff["schema"] == "tracekit.diff/1"
    assert diff["verdict"] == "faster"
    assert diff["causes"]["data_loading"]["ms_per_step"]["before"] == pytest.approx(40.0, abs=0.01)


def test_golden_html_has_no_absolute_paths_or_clock() -> None:
    html = (GOLDEN / "analyze_host_sync.html").read_text(encoding="utf-8")
    assert str(update_golden.REPO) not in html
    assert not re.search(r"\b20\d\d-\d\d-\d\d[ T]\d\d:\d\d", html)  # no "generated at" timestamps
