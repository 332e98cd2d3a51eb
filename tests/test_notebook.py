"""The worked notebook (docs/notebook.ipynb) runs end to end: its code cells, in order, as one
script (no Jupyter needed), with the network cut off; what each cell shows is rendered too."""

from __future__ import annotations

import ast
import json
import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

NOTEBOOK = REPO / "docs" / "notebook.ipynb"


def _cells() -> list[dict[str, Any]]:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    return list(nb["cells"])


def test_notebook_is_plain_nbformat_with_outputs_stripped() -> None:
    cells = _cells()
    assert {c["cell_type"] for c in cells} == {"markdown", "code"}
    for c in cells:
        assert isinstance(c["source"], list)
        if c["cell_type"] == "code":
            assert c["outputs"] == [], "strip the outputs before committing the notebook"
            assert c["execution_count"] is None


def _shown(value: Any) -> str:
    """What a notebook would display for a cell's last expression."""
    for method in ("_repr_html_", "_repr_markdown_"):
        render = getattr(value, method, None)
        if render is not None:
            out = render()
            assert isinstance(out, str)
            assert out
            return out
    return repr(value)


def test_notebook_runs_without_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the notebook tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.chdir(REPO / "docs")  # where Jupyter starts a notebook
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the notebook saves a report there
    namespace: dict[str, Any] = {"__name__": "__notebook__"}
    shown: list[str] = []
    for i, cell in enumerate(c for c in _cells() if c["cell_type"] == "code"):
        tree = ast.parse("".join(cell["source"]), filename=f"notebook cell {i}")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, f"notebook cell {i}", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), f"notebook cell {i}", "eval"), namespace)
            shown.append(_shown(value))
    # the story holds: the stall is found, the gaps are filtered, the fix is confirmed
    assert "The GPU waits for the DataLoader" in shown[0]
    assert namespace["stalls"].height == 8
    assert namespace["d"].verdict == "faster"
    assert "fixed: The GPU waits for the DataLoader" in "".join(shown)
